"""What tests/test_hf_mirror.py and tests/unit/test_hf_mirror.py share."""



class RecordingApi:
    def __init__(self):
        self.calls = []

    def create_commit(self, **kw):
        self.calls.append(kw)
        return type("CommitInfo", (), {"oid": "abc123"})()
