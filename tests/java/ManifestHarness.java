package qnnrelease;

import java.io.BufferedReader;
import java.io.InputStreamReader;

/**
 * Test harness: manifest files on stdin, one path a line, each resolved as {@code main} resolves it (model vad, chip
 * SM8750, the base URL in args[0]) in one JVM -> "exit\tmessage" a line, exit as main's (0, 9 for the manifest's
 * fault, 2 for any other). Anything else thrown is printed as "X\tits class", which no test accepts.
 */
public final class ManifestHarness {
    private ManifestHarness() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        StringBuilder out = new StringBuilder();
        String path;
        while ((path = in.readLine()) != null) {
            String text = QnnModelResolver.read(path);
            try {
                QnnModelResolver.resolve(text, "vad", "SM8750", null, args[0]);
                out.append("0\t\n");
            } catch (IllegalArgumentException e) {
                String m = String.valueOf(e.getMessage()).replace('\n', ' ');
                out.append(m.startsWith("manifest.json") ? "9" : "2").append('\t').append(m).append('\n');
            } catch (Throwable e) {  // a stack overflow, an out-of-memory: never an answer
                out.append("X\t").append(e.getClass().getName()).append('\n');
            }
        }
        System.out.print(out);
    }
}
