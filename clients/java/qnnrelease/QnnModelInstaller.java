// Part of qnn-release's download clients (hand-written: QnnModelResolver.java beside it is generated).
package qnnrelease;

import java.io.BufferedInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.reflect.Constructor;
import java.net.HttpURLConnection;
import java.net.URL;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Downloads, checks and unpacks what {@link QnnModelResolver} chose: the in-app twin of {@code qnn-fetch.sh}.
 *
 * <p>Java 8 / Android API 24 (no {@code java.nio.file}), no dependency of its own. The archives are
 * {@code .tar.bz2}; the JDK and Android read no bzip2, so the caller passes the decompressor, for example
 * Apache Commons Compress ({@code org.apache.commons:commons-compress}), reading every concatenated stream
 * (qnn-release writes bzip2 in parallel chunks):
 *
 * <pre>
 * QnnModelResolver.Choice c = QnnModelResolver.resolve(manifestText, "silero-vad", Build.SOC_MODEL, null,
 *         QnnModelResolver.downloadBase("OWNER/NAME", "v1.0.0"), "2.51.0");
 * if (c.found()) {
 *     QnnModelInstaller.Installed got = QnnModelInstaller.install(c, new File(getFilesDir(), "qnn"),
 *             in -&gt; new BZip2CompressorInputStream(in, true));
 *     // got.model: the archive's folder (its _ctx.onnx stubs and _ctx_qnn.bin binaries, or the twin's
 *     // graphs); got.qnnLibs: the qnn-libs folder (null for the twin)
 * }
 * </pre>
 *
 * <p>What it does, as {@code qnn-fetch.sh} does: each download is bounded by the manifest's size and checked
 * against its sha256 before anything is unpacked (pieces one by one, then joined and checked whole); a failed
 * download is tried three times. Every tar member must lie under the one top folder {@code package} writes
 * (the asset's name without {@code .tar.bz2}), be a regular file or a folder (no links, devices or absolute
 * paths, no {@code ..}), at most 10,000 members and 8 GiB expanded. The archive is unpacked into a
 * temporary folder of {@code dest} and renamed into place only when whole: a failed or refused install
 * leaves {@code dest} as it was. Errors are {@link InstallException}s whose {@code exitCode} is the clients'
 * table (4: download failed or sha256 mismatch; 9: archive refused; 10: not found (404); 2: usage).
 *
 * <p>{@code java -cp commons-compress.jar:. qnnrelease.QnnModelInstaller MANIFEST MODEL CHIP DEST
 * [PRECISION|-] [BASE_URL|-] [QNN_RUNTIME]} (MANIFEST a file or an http(s) URL) installs and prints
 * {@code kind=}, {@code path=} and {@code qnn_libs_path=} lines; there Commons Compress is found on the class path.
 */
public final class QnnModelInstaller {
    /** The clients' exit codes (docs/app-developers.md, "Exit codes"). */
    public static final int EXIT_DOWNLOAD = 4;
    public static final int EXIT_REFUSED = 9;
    public static final int EXIT_NOT_FOUND = 10;
    public static final int MAX_MEMBERS = 10000;
    public static final long MAX_EXPANDED_BYTES = 8L << 30;
    static final int ATTEMPTS = 3;

    private QnnModelInstaller() {
    }

    /** Turns the compressed bytes of an archive into its tar stream. */
    public interface Decompressor {
        InputStream open(InputStream compressed) throws IOException;
    }

    /** A failure with its exit code; the message is one line. */
    public static final class InstallException extends IOException {
        private static final long serialVersionUID = 1L;
        public final int exitCode;

        InstallException(int exitCode, String message) {
            super(message);
            this.exitCode = exitCode;
        }
    }

    /** Where the archive and its QNN libraries were unpacked. */
    public static final class Installed {
        public final String kind;
        public final File model;
        public final File qnnLibs;

        Installed(String kind, File model, File qnnLibs) {
            this.kind = kind;
            this.model = model;
            this.qnnLibs = qnnLibs;
        }
    }

    /**
     * Downloads, checks and unpacks the choice's archive (and its qnn-libs) into {@code dest}: both are unpacked and
     * checked before either is moved in, so a failure leaves {@code dest} as it was.
     */
    public static Installed install(QnnModelResolver.Choice c, File dest, Decompressor bz2) throws IOException {
        if (!c.found()) {
            throw new InstallException(c.runtimeTooOld ? QnnModelResolver.EXIT_RUNTIME_TOO_OLD
                    : QnnModelResolver.EXIT_NO_BUILD, c.reason);
        }
        if (c.url == null) {
            throw new InstallException(QnnModelResolver.EXIT_USAGE, "the choice has no URL: resolve it with a base URL "
                    + "(QnnModelResolver.downloadBase)");
        }
        boolean made = !dest.isDirectory();
        if (made && !dest.mkdirs()) {
            throw new InstallException(QnnModelResolver.EXIT_USAGE, dest + ": cannot create the folder");
        }
        File work = new File(dest, ".qnn-unpack-" + UUID.randomUUID());
        try {
            if (!work.mkdir()) {
                throw new InstallException(QnnModelResolver.EXIT_USAGE, dest + ": cannot write there");
            }
            String model = prepare(c.asset, c.url, c.sha256, c.size, c.pieces, work, bz2);
            String libs = c.qnnLibs != null && c.qnnLibsUrl != null
                    ? prepare(c.qnnLibs, c.qnnLibsUrl, c.qnnLibsSha256, c.qnnLibsSize, c.qnnLibsPieces, work, bz2) : null;
            File m = swapIn(work, model, dest);
            return new Installed(c.kind, m, libs == null ? null : swapIn(work, libs, dest));
        } catch (IOException e) {
            if (made) {
                delete(work);
                dest.delete();  // only when empty: nothing of the caller's is ever removed
            }
            throw e;
        } finally {
            delete(work);
        }
    }

    /** The asset downloaded, checked and unpacked into {@code work}; returns its top folder's name. */
    private static String prepare(String asset, String url, String sha256, long size,
                                  List<QnnModelResolver.Piece> pieces, File work, Decompressor bz2) throws IOException {
        File archive = new File(work, ".download-" + UUID.randomUUID() + ".part");
        try {
            if (pieces.isEmpty()) {
                download(url, sha256, size, archive, asset);
            } else {
                join(pieces, archive, asset);
                String got = sha256(archive);
                if (!got.equals(sha256)) {  // every piece matched its own sha256
                    throw new InstallException(EXIT_DOWNLOAD, asset + ": its pieces join to sha256 "
                            + got.substring(0, 16) + "..., not the manifest's " + sha256.substring(0, 16)
                            + "...; nothing was kept");
                }
            }
            String top = asset.substring(0, asset.length() - ".tar.bz2".length());
            unpackInto(archive, asset, top, work, bz2);
            return top;
        } finally {
            delete(archive);
        }
    }

    /** {@code work/top} moved to {@code dest/top}, replacing an earlier copy only once the new one is in place. */
    private static File swapIn(File work, String top, File dest) throws InstallException {
        File target = new File(dest, top);
        File old = new File(dest, ".qnn-old-" + UUID.randomUUID());
        if (target.exists() && !target.renameTo(old)) {
            throw new InstallException(QnnModelResolver.EXIT_USAGE, target + ": cannot replace the earlier copy");
        }
        if (!new File(work, top).renameTo(target)) {
            old.renameTo(target);
            throw new InstallException(QnnModelResolver.EXIT_USAGE, target + ": cannot move the new copy in");
        }
        delete(old);
        return target;
    }

    private static void join(List<QnnModelResolver.Piece> pieces, File joined, String asset) throws IOException {
        OutputStream out = new FileOutputStream(joined);
        try {
            for (QnnModelResolver.Piece p : pieces) {
                File part = new File(joined.getPath() + "." + p.name);
                try {
                    download(p.url, p.sha256, p.size, part, asset + " (" + p.name + ")");
                    copy(new FileInputStream(part), out, Long.MAX_VALUE);
                } finally {
                    delete(part);
                }
            }
        } finally {
            out.close();
        }
    }

    /** Downloads {@code url} into {@code to}, at most {@code size} bytes, checked against {@code sha256}. */
    public static void download(String url, String sha256, long size, File to, String what) throws IOException {
        InstallException last = null;
        for (int attempt = 1; attempt <= ATTEMPTS; attempt++) {
            try {
                fetchOnce(url, size, to, what);
                String got = sha256(to);
                if (got.equals(sha256)) {
                    return;
                }
                last = new InstallException(EXIT_DOWNLOAD, what + ": downloaded sha256 " + got.substring(0, 16)
                        + "... is not the manifest's " + sha256.substring(0, 16) + "... (after " + attempt
                        + " attempt(s)); nothing was kept");
            } catch (InstallException e) {
                if (e.exitCode != EXIT_DOWNLOAD) {
                    throw e;
                }
                last = e;
            }
            delete(to);
        }
        throw last;
    }

    private static void fetchOnce(String url, long size, File to, String what) throws IOException {
        HttpURLConnection conn;
        int status;
        try {
            conn = (HttpURLConnection) new URL(url).openConnection();
            conn.setConnectTimeout(30000);
            conn.setReadTimeout(60000);
            conn.setInstanceFollowRedirects(true);  // GitHub answers a release download with a redirect
            status = conn.getResponseCode();
        } catch (IOException e) {
            throw new InstallException(EXIT_DOWNLOAD, what + ": " + url + " unreachable (" + oneLine(e) + ")");
        }
        try {
            if (status == 404) {
                throw new InstallException(EXIT_NOT_FOUND, what + ": " + url + " answered 404: no such asset");
            }
            if (status != 200) {
                throw new InstallException(EXIT_DOWNLOAD, what + ": " + url + " answered HTTP " + status);
            }
            long copied;
            OutputStream out = new FileOutputStream(to);
            try {
                copied = copy(conn.getInputStream(), out, size + 1);
            } catch (IOException e) {
                throw new InstallException(EXIT_DOWNLOAD, what + ": the download broke off (" + oneLine(e) + ")");
            } finally {
                out.close();
            }
            if (copied != size) {
                throw new InstallException(EXIT_DOWNLOAD, what + ": " + (copied > size ? "more than" : "only " + copied
                        + " of") + " the manifest's " + size + " bytes");
            }
        } finally {
            conn.disconnect();
        }
    }

    /** Copies at most {@code limit} bytes and closes {@code in}; returns how many were copied. */
    private static long copy(InputStream in, OutputStream out, long limit) throws IOException {
        long n = 0;
        try {
            byte[] buf = new byte[1 << 16];
            int r;
            while (n < limit && (r = in.read(buf, 0, (int) Math.min(buf.length, limit - n))) > 0) {
                out.write(buf, 0, r);
                n += r;
            }
        } finally {
            in.close();
        }
        return n;
    }

    /** The sha256 of a file, lower-case hex. */
    public static String sha256(File f) throws IOException {
        MessageDigest md;
        try {
            md = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        InputStream in = new FileInputStream(f);
        try {
            byte[] buf = new byte[1 << 16];
            int r;
            while ((r = in.read(buf)) > 0) {
                md.update(buf, 0, r);
            }
        } finally {
            in.close();
        }
        StringBuilder b = new StringBuilder();
        for (byte x : md.digest()) {
            b.append(String.format(Locale.ROOT, "%02x", x & 0xff));
        }
        return b.toString();
    }

    /**
     * Unpacks a checked archive whose members all lie under {@code top}/ into {@code dest/top}, replacing an
     * earlier copy only once the new one is whole; refuses (exit 9) anything else, leaving {@code dest} as it was.
     */
    public static File unpack(File archive, String top, File dest, Decompressor bz2) throws IOException {
        File work = new File(dest, ".qnn-unpack-" + UUID.randomUUID());
        try {
            if (!work.mkdir()) {
                throw new InstallException(QnnModelResolver.EXIT_USAGE, dest + ": cannot write there");
            }
            unpackInto(archive, top + ".tar.bz2", top, work, bz2);
            return swapIn(work, top, dest);
        } finally {
            delete(work);
        }
    }

    private static void unpackInto(File archive, String name, String top, File work, Decompressor bz2)
            throws IOException {
        InputStream tar = null;
        try {
            tar = bz2.open(new BufferedInputStream(new FileInputStream(archive)));
            new TarReader(tar, name, top).extractInto(work);
        } catch (InstallException e) {
            if (e.exitCode == EXIT_REFUSED && !e.getMessage().startsWith(name)) {  // the decompressor's refusal
                throw new InstallException(EXIT_REFUSED, name + ": refused: " + e.getMessage());
            }
            throw e;
        } catch (IOException e) {  // a corrupt stream: refused, as the other clients refuse it
            throw new InstallException(EXIT_REFUSED, name + ": refused: not a readable tar.bz2 archive ("
                    + oneLine(e) + ")");
        } finally {
            if (tar != null) {
                tar.close();
            }
        }
    }

    /** A ustar/pax reader that writes regular files and folders only, each checked before it is written. */
    static final class TarReader {
        private final InputStream in;
        private final String archive;
        private final String top;
        private final Set<String> names = new HashSet<String>();
        private final byte[] block = new byte[512];
        private long expanded;
        private int members;
        private int headers;

        TarReader(InputStream in, String archive, String top) {
            this.in = in;
            this.archive = archive;
            this.top = top;
        }

        private InstallException refuse(String what) {
            return new InstallException(EXIT_REFUSED, archive + ": refused: " + what
                    + " (hint: it is not an archive qnn-release's package wrote; nothing was written)");
        }

        private boolean readBlock() throws IOException {
            int n = 0;
            while (n < 512) {
                int r = in.read(block, n, 512 - n);
                if (r < 0) {
                    if (n == 0) {
                        return false;
                    }
                    throw refuse("truncated in a header");
                }
                n += r;
            }
            return true;
        }

        void extractInto(File root) throws IOException {
            String paxPath = null;
            long paxSize = -1;
            while (true) {
                if (!readBlock()) {
                    throw refuse("truncated: no end-of-archive blocks");
                }
                if (allZero()) {
                    break;
                }
                checkChecksum();
                char type = (char) (block[156] == 0 ? '0' : block[156]);
                long own = octal(124, 12);
                if (type == 'x' || type == 'g') {  // an extended header's own size, never a pax override
                    if (++headers > MAX_MEMBERS) {
                        throw refuse("more than " + MAX_MEMBERS + " extended headers");
                    }
                    String[] pax = pax(own);
                    if (type == 'x') {
                        paxPath = pax[0];
                        paxSize = pax[1] == null ? -1 : parseSize(pax[1]);
                    }
                    continue;
                }
                String name = paxPath != null ? paxPath : headerName();
                long size = paxSize >= 0 ? paxSize : own;
                paxPath = null;
                paxSize = -1;
                File out = checked(root, name, type, size);
                if (type == '5') {
                    if (!out.isDirectory() && !out.mkdirs()) {
                        throw refuse("member '" + name + "' replaces a file, or is under one");
                    }
                    skip(size + (512 - size % 512) % 512);  // a folder's data, if any: never read as a header
                    continue;
                }
                File parent = out.getParentFile();
                if (!parent.isDirectory() && !parent.mkdirs()) {
                    throw refuse("member '" + name + "' is under a file");
                }
                OutputStream w = new FileOutputStream(out);
                try {
                    copyExactly(w, size);
                } finally {
                    w.close();
                }
                skip((512 - size % 512) % 512);
            }
            if (members == 0) {
                throw refuse("the archive is empty");
            }
        }

        private File checked(File root, String name, char type, long size) throws IOException {
            if (++members > MAX_MEMBERS) {
                throw refuse("more than " + MAX_MEMBERS + " members");
            }
            expanded += size;
            if (expanded > MAX_EXPANDED_BYTES) {
                throw refuse("expands to more than " + (MAX_EXPANDED_BYTES >> 30) + " GiB");
            }
            if (type != '0' && type != '5') {
                throw refuse("member '" + name + "' is a link, device or other special file (type " + type + ")");
            }
            String path = type == '5' && name.endsWith("/") ? name.substring(0, name.length() - 1) : name;
            if (path.startsWith("/") || path.indexOf('\\') >= 0 || path.indexOf('\0') >= 0
                    || (path.length() > 1 && path.charAt(1) == ':')) {
                throw refuse("member '" + name + "' has an absolute path");
            }
            String[] parts = path.split("/", -1);
            for (String p : parts) {
                if (p.equals("..")) {
                    throw refuse("member '" + name + "' points outside the destination");
                }
                if (p.isEmpty() || p.equals(".")) {
                    throw refuse("member '" + name + "' is not a plain relative path");
                }
            }
            if (!parts[0].equals(top)) {
                throw refuse("member '" + name + "' is not under " + top + "/ (the layout package writes)");
            }
            if (parts.length == 1 && type != '5') {
                throw refuse("member '" + name + "' should be the archive's top folder");
            }
            if (!names.add(path) && type != '5') {
                throw refuse("member '" + name + "' appears twice");
            }
            File f = new File(root, path);
            if (type == '0' && f.exists()) {
                throw refuse("member '" + name + "' replaces an earlier member");
            }
            return f;
        }

        private boolean allZero() {
            for (byte b : block) {
                if (b != 0) {
                    return false;
                }
            }
            return true;
        }

        private void checkChecksum() throws IOException {
            long want = octal(148, 8);
            long sum = 0;
            for (int i = 0; i < 512; i++) {
                sum += (i >= 148 && i < 156) ? ' ' : (block[i] & 0xff);
            }
            if (sum != want) {
                throw refuse("a header's checksum does not match (not a tar archive, or corrupt)");
            }
        }

        private String field(int off, int len) {
            int end = off;
            while (end < off + len && block[end] != 0) {
                end++;
            }
            return new String(block, off, end - off, UTF8);
        }

        private String headerName() {
            String name = field(0, 100);
            String magic = field(257, 6);
            String prefix = magic.startsWith("ustar") ? field(345, 155) : "";
            return prefix.isEmpty() ? name : prefix + "/" + name;
        }

        private long octal(int off, int len) throws IOException {
            String s = field(off, len).trim();
            if (s.isEmpty() || !s.matches("[0-7]{1,12}")) {
                throw refuse("a header's numeric field is not octal");
            }
            return Long.parseLong(s, 8);
        }

        private long parseSize(String s) throws IOException {
            if (!s.matches("[0-9]{1,15}")) {
                throw refuse("a pax size is not a number");
            }
            return Long.parseLong(s);
        }

        /** The pax record's path and size (either may be null). */
        private String[] pax(long size) throws IOException {
            if (size > 1 << 20) {
                throw refuse("a pax header of more than 1 MiB");
            }
            java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
            copyExactly(b, size);
            skip((512 - size % 512) % 512);
            byte[] data = b.toByteArray();
            String[] out = new String[2];
            int i = 0;
            while (i < data.length) {
                int sp = i;
                while (sp < data.length && data[sp] != ' ') {
                    sp++;
                }
                String len = new String(data, i, sp - i, UTF8);
                // "LEN KEY=VALUE\n": at least its own digits, the space, one key character, '=' and '\n'
                if (!len.matches("[0-9]{1,7}") || Integer.parseInt(len) < sp - i + 4
                        || i + Integer.parseInt(len) > data.length || data[i + Integer.parseInt(len) - 1] != '\n') {
                    throw refuse("a malformed pax record");
                }
                int end = i + Integer.parseInt(len);
                String rec = new String(data, sp + 1, Math.max(0, end - sp - 2), UTF8);
                int eq = rec.indexOf('=');
                if (eq > 0 && rec.substring(0, eq).equals("path")) {
                    out[0] = rec.substring(eq + 1);
                } else if (eq > 0 && rec.substring(0, eq).equals("size")) {
                    out[1] = rec.substring(eq + 1);
                }
                i = end;
            }
            return out;
        }

        private void copyExactly(OutputStream out, long size) throws IOException {
            byte[] buf = new byte[1 << 16];
            long left = size;
            while (left > 0) {
                int r = in.read(buf, 0, (int) Math.min(buf.length, left));
                if (r < 0) {
                    throw refuse("truncated in a member's data");
                }
                out.write(buf, 0, r);
                left -= r;
            }
        }

        private void skip(long n) throws IOException {
            copyExactly(new OutputStream() {
                @Override
                public void write(int b) {
                }

                @Override
                public void write(byte[] b, int off, int len) {
                }
            }, n);
        }
    }

    private static final java.nio.charset.Charset UTF8 = java.nio.charset.Charset.forName("UTF-8");

    private static void delete(File f) {
        File[] children = f.isDirectory() && !isLink(f) ? f.listFiles() : null;
        if (children != null) {
            for (File c : children) {
                delete(c);
            }
        }
        if (f.exists() && !f.delete()) {
            f.deleteOnExit();
        }
    }

    /** Whether {@code f} is a symbolic link (Java 8 / API 24: no java.nio.file): never followed when deleting. */
    private static boolean isLink(File f) {
        try {
            File parent = f.getAbsoluteFile().getParentFile();
            File plain = new File(parent == null ? f : new File(parent.getCanonicalFile(), f.getName()), "");
            return !plain.getAbsolutePath().equals(f.getCanonicalFile().getAbsolutePath());
        } catch (IOException e) {
            return true;  // unknown: not followed
        }
    }

    private static String oneLine(Throwable e) {
        String m = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
        return m.replace('\n', ' ');
    }

    /** Commons Compress's multi-stream bzip2 reader, when it is on the class path (for {@link #main}). */
    static Decompressor commonsCompress() throws InstallException {
        try {
            Class<?> k = Class.forName("org.apache.commons.compress.compressors.bzip2.BZip2CompressorInputStream");
            final Constructor<?> make = k.getConstructor(InputStream.class, boolean.class);
            return new Decompressor() {
                @Override
                public InputStream open(InputStream compressed) throws IOException {
                    try {
                        return (InputStream) make.newInstance(compressed, Boolean.TRUE);
                    } catch (ReflectiveOperationException e) {
                        Throwable why = e.getCause() == null ? e : e.getCause();
                        throw new InstallException(EXIT_REFUSED, "not a bzip2 archive (" + oneLine(why) + ")");
                    }
                }
            };
        } catch (ReflectiveOperationException e) {
            throw new InstallException(QnnModelResolver.EXIT_USAGE, "no bzip2 reader on the class path (hint: add "
                    + "Apache Commons Compress, org.apache.commons:commons-compress; Debian: libcommons-compress-java)");
        }
    }

    private static String readManifest(String where) throws IOException {
        if (!where.startsWith("http://") && !where.startsWith("https://")) {
            InputStream in = new FileInputStream(where);
            java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
            copy(in, b, QnnModelResolver.MAX_MANIFEST_CHARS);
            return new String(b.toByteArray(), UTF8);
        }
        return httpText(where, QnnModelResolver.MAX_MANIFEST_CHARS, "manifest.json");
    }

    /** The body of a GET of {@code url}, at most {@code limit} bytes: 10 on 404, 4 on any other failure, 9 past it. */
    static String httpText(String url, long limit, String what) throws IOException {
        HttpURLConnection conn;
        try {
            conn = (HttpURLConnection) new URL(url).openConnection();
            conn.setConnectTimeout(30000);
            conn.setReadTimeout(60000);
        } catch (IOException e) {
            throw new InstallException(EXIT_DOWNLOAD, url + " unreachable (" + oneLine(e) + ")");
        }
        try {
            int status = conn.getResponseCode();
            if (status != 200) {
                throw new InstallException(status == 404 ? EXIT_NOT_FOUND : EXIT_DOWNLOAD, url + " answered HTTP "
                        + status + (status == 404 ? ": no such release" : ""));
            }
            java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
            long n = copy(conn.getInputStream(), b, limit + 1L);
            if (n > limit) {
                throw new InstallException(EXIT_REFUSED, what + ": refused (json): more than " + limit + " bytes");
            }
            return new String(b.toByteArray(), UTF8);
        } catch (IOException e) {
            if (e instanceof InstallException) {
                throw e;
            }
            throw new InstallException(EXIT_DOWNLOAD, url + " unreachable (" + oneLine(e) + ")");
        } finally {
            conn.disconnect();
        }
    }

    private static final Pattern BASE = Pattern.compile("^(https?://.+)/([A-Za-z0-9._-]+/[A-Za-z0-9._-]+)"
            + "/releases/download/([^/]+)/$");
    private static final Pattern TAG_NAME = Pattern.compile("\"tag_name\"[ \\t\\r\\n]*:[ \\t\\r\\n]*\"([A-Za-z0-9._+-]*)\"");
    private static final Pattern VERSION_TAG = Pattern.compile("v?[0-9]{1,9}(\\.[0-9]{1,9})*");

    /** An earlier release that has a binary the app's runtime loads: its tag and the choice in it. */
    public static final class Earlier {
        public final String tag;
        public final QnnModelResolver.Choice choice;

        Earlier(String tag, QnnModelResolver.Choice choice) {
            this.tag = tag;
            this.choice = choice;
        }
    }

    /**
     * The tag names of the repository's published releases in GitHub's order (newest first; at most 1,000, pages of
     * 100), read as the body streams: only plain URL-safe JSON strings, never a linked part, never {@code mine}.
     * Memory stays bounded whatever a page weighs (a catalogue release lists up to 1,000 assets).
     */
    static List<String> releaseTags(String url, String mine) throws IOException {
        List<String> tags = new ArrayList<String>();
        for (int page = 1; page <= 10; page++) {
            HttpURLConnection conn;
            int found = 0;
            try {
                conn = (HttpURLConnection) new URL(url + "?per_page=100&page=" + page).openConnection();
                conn.setConnectTimeout(30000);
                conn.setReadTimeout(60000);
                int status = conn.getResponseCode();
                if (status != 200) {
                    throw new InstallException(status == 404 ? EXIT_NOT_FOUND : EXIT_DOWNLOAD, url + " answered HTTP "
                            + status + (status == 404 ? ": no such repository, or it is private" : ""));
                }
                java.io.Reader in = new java.io.InputStreamReader(conn.getInputStream(), UTF8);
                try {
                    StringBuilder window = new StringBuilder();
                    char[] buf = new char[1 << 16];
                    int n;
                    while ((n = in.read(buf)) > 0) {
                        window.append(buf, 0, n);
                        Matcher t = TAG_NAME.matcher(window);
                        int done = Math.max(0, window.length() - 512);  // a match may straddle two reads
                        while (t.find()) {
                            found++;
                            String name = t.group(1);
                            if (!name.isEmpty() && !name.startsWith(".") && !name.equals(mine)
                                    && !name.matches(".*-part[0-9]+") && !tags.contains(name)) {
                                tags.add(name);
                            }
                            done = t.end();
                        }
                        window.delete(0, done);
                    }
                } finally {
                    in.close();
                    conn.disconnect();
                }
            } catch (InstallException e) {
                throw e;
            } catch (IOException e) {
                throw new InstallException(EXIT_DOWNLOAD, url + ": could not list the releases (" + oneLine(e) + ")");
            }
            if (found == 0) {
                break;
            }
        }
        return tags;
    }

    /**
     * The newest earlier published release whose binary of {@code model} for the chip the app's {@code qnnRuntime}
     * loads, as {@code qnn-release fetch --look-back} and {@code qnn-fetch.sh --look-back} find it: the
     * repository's releases listed by GitHub's API at {@code apiBase} (at most 1,000; linked parts never, drafts
     * are not listed without a token), by version where every tag is one (none newer than {@code downloadBase}'s),
     * else in GitHub's order; each manifest checked by the same contract. Null when none has one.
     */
    public static Earlier lookBack(String apiBase, String downloadBase, String model, String socModel,
                                   String precision, String qnnRuntime) throws IOException {
        Matcher m = BASE.matcher(downloadBase == null ? "" : downloadBase);
        if (!m.matches() || qnnRuntime == null) {
            throw new InstallException(QnnModelResolver.EXIT_USAGE, "look-back needs the release's download base "
                    + "(QnnModelResolver.downloadBase) and the app's QNN runtime");
        }
        String host = m.group(1);
        String repo = m.group(2);
        final String mine = m.group(3);
        List<String> tags = releaseTags(apiBase.replaceAll("/+$", "") + "/repos/" + repo + "/releases", mine);
        boolean versions = VERSION_TAG.matcher(mine).matches();
        List<String> older = new ArrayList<String>();
        for (String t : tags) {  // a version-shaped tag newer than the one asked for is never a candidate
            boolean version = VERSION_TAG.matcher(t).matches();
            versions &= version;
            if (!version || !VERSION_TAG.matcher(mine).matches()
                    || QnnModelResolver.compareVersions(t.replaceFirst("^v", ""), mine.replaceFirst("^v", "")) <= 0) {
                older.add(t);
            }
        }
        if (versions) {  // every tag a version: newest first by version, else GitHub's order (newest first)
            Collections.sort(older, new Comparator<String>() {
                @Override
                public int compare(String a, String b) {
                    return QnnModelResolver.compareVersions(b.replaceFirst("^v", ""), a.replaceFirst("^v", ""));
                }
            });
        }
        tags = older;
        for (String t : tags) {
            String base = host + "/" + repo + "/releases/download/" + t + "/";
            QnnModelResolver.Choice c;
            try {
                c = QnnModelResolver.resolve(httpText(base + "manifest.json", QnnModelResolver.MAX_MANIFEST_CHARS,
                        "manifest.json"), model, socModel, precision, base, qnnRuntime);
            } catch (InstallException e) {
                continue;  // no manifest: not a qnn-release release
            } catch (IllegalArgumentException e) {
                continue;  // refused by the contract, or no such model there
            }
            if (c.found() && "binary".equals(c.kind)) {
                return new Earlier(t, c);
            }
        }
        return null;
    }

    /**
     * java qnnrelease.QnnModelInstaller MANIFEST MODEL CHIP DEST [PRECISION|-] [BASE_URL|-] [QNN_RUNTIME
     * [--look-back]]; the look-back lists releases through $GITHUB_API_URL (default https://api.github.com).
     */
    public static void main(String[] args) {
        boolean lookBack = args.length > 0 && "--look-back".equals(args[args.length - 1]);
        if (lookBack) {
            args = java.util.Arrays.copyOf(args, args.length - 1);
        }
        if (args.length < 4 || args.length > 7 || (lookBack && args.length < 7)) {
            System.err.println("usage: QnnModelInstaller MANIFEST MODEL CHIP DEST [PRECISION|-] [BASE_URL|-] "
                    + "[QNN_RUNTIME [--look-back]]");
            System.exit(QnnModelResolver.EXIT_USAGE);
        }
        String precision = args.length > 4 && !"-".equals(args[4]) ? args[4] : null;
        String base = args.length > 5 && !"-".equals(args[5]) ? args[5] : null;
        if (base == null && args[0].matches("https?://.*/manifest\\.json")) {
            base = args[0].substring(0, args[0].length() - "manifest.json".length());
        }
        String runtime = args.length > 6 ? args[6] : null;
        try {
            QnnModelResolver.Choice c;
            try {
                c = QnnModelResolver.resolve(readManifest(args[0]), args[1], args[2], precision, base, runtime);
            } catch (IllegalArgumentException e) {
                boolean manifest = String.valueOf(e.getMessage()).startsWith("manifest.json");
                throw new InstallException(manifest ? EXIT_REFUSED : QnnModelResolver.EXIT_USAGE, e.getMessage());
            }
            if (c.runtimeTooOld && lookBack) {
                String api = System.getenv("GITHUB_API_URL");
                Earlier e = lookBack(api == null || api.isEmpty() ? "https://api.github.com" : api, base, args[1],
                        args[2], precision, runtime);
                if (e == null) {
                    throw new InstallException(QnnModelResolver.EXIT_RUNTIME_TOO_OLD, c.reason.replaceFirst(
                            "^runtime: ", "") + "; no earlier release has one QNN runtime " + runtime + " loads");
                }
                System.err.println("QnnModelInstaller: the release needs a newer QNN runtime than " + runtime
                        + "; installing from " + e.tag);
                c = e.choice;
            }
            if (!c.found()) {
                throw new InstallException(c.runtimeTooOld ? QnnModelResolver.EXIT_RUNTIME_TOO_OLD
                        : QnnModelResolver.EXIT_NO_BUILD, c.reason);
            }
            Installed got = install(c, new File(args[3]), commonsCompress());
            System.out.println("kind=" + got.kind);
            System.out.println("archive=" + c.asset);
            System.out.println("sdk_version=" + c.sdkVersion);
            System.out.println("path=" + got.model.getAbsolutePath());
            System.out.println("qnn_libs_path=" + (got.qnnLibs == null ? "" : got.qnnLibs.getAbsolutePath()));
        } catch (InstallException e) {
            System.err.println("QnnModelInstaller: error: " + e.getMessage());
            System.exit(e.exitCode);
        } catch (IOException e) {
            System.err.println("QnnModelInstaller: error: " + oneLine(e));
            System.exit(EXIT_DOWNLOAD);
        }
    }
}
