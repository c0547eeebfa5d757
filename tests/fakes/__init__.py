"""Stand-ins for what cannot run here (GitHub, Hugging Face, AI Hub, a package index, adb, the QAIRT
SDK), each following its documented contract and citing its evidence rule by rule."""
