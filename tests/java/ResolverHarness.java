package qnnrelease;

import java.io.BufferedReader;
import java.io.InputStreamReader;

/** Test harness: hex-encoded UTF-8 chip spellings on stdin, one a line -> QnnModelResolver.chip() or "none". */
public final class ResolverHarness {
    private ResolverHarness() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            byte[] b = new byte[line.length() / 2];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            }
            String chip = QnnModelResolver.chip(new String(b, "UTF-8"));
            out.append(chip == null ? "none" : chip).append('\n');
        }
        System.out.print(out);
    }
}
