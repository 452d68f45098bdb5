package io.loglake.storage;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;
import java.util.concurrent.ThreadLocalRandom;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import org.apache.hadoop.fs.s3a.S3AUtils;
import org.apache.hadoop.fs.s3a.impl.PutObjectOptions;
import org.apache.hadoop.fs.store.audit.AuditSpan;
import software.amazon.awssdk.awscore.AwsRequestOverrideConfiguration;
import software.amazon.awssdk.core.exception.SdkException;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Exception;

/**
 * A Delta log store for {@code s3a://} tables that is safe with writers on many hosts, with no
 * DynamoDB or other service: a commit file is created with one conditional PutObject
 * ({@code If-None-Match: *}), which the store refuses (HTTP 412) when another writer created
 * that version first. delta-rs commits the same way, so Spark's and delta-rs' writers of one
 * table are safe against each other.
 *
 * <p>Delta's own {@code S3SingleDriverLogStore} checks that the file is absent and then
 * overwrites it, which is safe only between the writers of one JVM. Set this class as
 * {@code spark.delta.logStore.s3a.impl}; the store must honour conditional writes (loglake's
 * tests check versitygw; AWS documents them for S3; check any other store).
 *
 * <p>Reads and listings are the parent's: S3 lists strongly consistently.
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {

    /** The configuration key that names this class for {@code s3a://} paths. */
    public static final String CONF_KEY = "spark.delta.logStore.s3a.impl";

    /**
     * Attempts of a put that the store answers 409 ConditionalRequestConflict: another
     * conditional write of the same key is in flight and its outcome is not yet known.
     */
    static final int CONFLICT_ATTEMPTS = 6;
    static final long CONFLICT_BACKOFF_MS = 50;

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        S3AFileSystem fs = s3a(path, hadoopConf);
        byte[] body = content(actions);
        if (overwrite) {
            // _last_checkpoint and the like: last writer wins, as with every log store.
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(body);
            }
            return;
        }
        Path qualified = fs.makeQualified(path);
        // One audit span for the whole commit: S3A binds the requests of its client to it.
        AuditSpan span = fs.createSpan("loglake_delta_commit", qualified.toString(), null);
        try {
            createIfAbsent(fs, qualified, body);
        } finally {
            span.close();
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;  // a single PutObject is atomic: readers see all of it or nothing
    }

    /** The commit file's bytes: every action followed by a newline, like Delta's log stores. */
    static byte[] content(Iterator<String> actions) {
        StringBuilder text = new StringBuilder();
        while (actions.hasNext()) {
            text.append(actions.next()).append('\n');
        }
        return text.toString().getBytes(StandardCharsets.UTF_8);
    }

    private static S3AFileSystem s3a(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (fs instanceof S3AFileSystem) {
            return (S3AFileSystem) fs;
        }
        throw new IOException(String.format(
            "%s commits through S3 conditional writes and needs the S3A filesystem, but %s is on "
                + "scheme '%s' (%s): set %s for s3a:// tables only, and leave other schemes to "
                + "Delta's log stores",
            S3ConditionalLogStore.class.getName(), path, path.toUri().getScheme(),
            fs.getClass().getName(), CONF_KEY));
    }

    /**
     * Create {@code path} with {@code body} unless it exists.
     *
     * @throws FileAlreadyExistsException when another writer created it first (Delta then checks
     *     for conflicts and tries the next version; Spark's checkpoint then fails the query that
     *     lost, {@link S3ConditionalCheckpointFileManager})
     */
    static void createIfAbsent(S3AFileSystem fs, Path path, byte[] body) throws IOException {
        String key = fs.pathToKey(path);
        S3Client s3 = fs.getS3AInternals().getAmazonS3Client("loglake conditional Delta commit");
        for (int attempt = 1; ; attempt++) {
            // S3A's request factory: the bucket's encryption, ACL and storage class settings apply.
            PutObjectRequest.Builder request = fs.getRequestFactory()
                .newPutObjectRequestBuilder(key, PutObjectOptions.keepingDirs(), body.length, false);
            // Set as a header (SDK 2.24.6, hadoop-aws 3.4.1's, had no ifNoneMatch()): it goes on as is,
            // beside whatever override S3A set (its timeouts).
            AwsRequestOverrideConfiguration current = request.overrideConfiguration();
            AwsRequestOverrideConfiguration.Builder override =
                current == null ? AwsRequestOverrideConfiguration.builder() : current.toBuilder();
            request.overrideConfiguration(override.putHeader("If-None-Match", "*").build());
            try {
                s3.putObject(request.build(), RequestBody.fromBytes(body));
                return;
            } catch (S3Exception e) {
                if (e.statusCode() == 412) {
                    // The key exists. It may be this very commit: the SDK retries a put whose
                    // answer was lost, and that retry finds the first attempt's object.
                    if (Arrays.equals(body, readIfExists(fs, path))) {
                        return;
                    }
                    throw alreadyExists(path, "another writer committed this version first (HTTP 412)");
                }
                if (e.statusCode() != 409) {
                    throw S3AUtils.translateException("conditional put", path, e);
                }
                // 409 ConditionalRequestConflict: a concurrent conditional write of this key is
                // in flight. Its outcome decides: it created the key (we lost), or it failed and
                // the version is still free.
                byte[] existing = readIfExists(fs, path);
                if (existing != null) {
                    if (Arrays.equals(body, existing)) {
                        return;
                    }
                    throw alreadyExists(path, "another writer committed this version first (HTTP 409, then found)");
                }
                if (attempt >= CONFLICT_ATTEMPTS) {
                    // Still free but still contended: Delta treats this as a lost race, lists the
                    // log, finds this version absent and attempts it again.
                    throw alreadyExists(path, "conditional writes of this version kept conflicting (HTTP 409, "
                        + attempt + " attempts)");
                }
                backoff(attempt);
            } catch (SdkException e) {
                throw S3AUtils.translateException("conditional put", path, e);
            }
        }
    }

    /** The object's bytes, or null when there is none. */
    private static byte[] readIfExists(S3AFileSystem fs, Path path) throws IOException {
        try (FSDataInputStream in = fs.open(path)) {
            return in.readAllBytes();
        } catch (FileNotFoundException e) {
            return null;
        }
    }

    private static FileAlreadyExistsException alreadyExists(Path path, String reason) {
        return new FileAlreadyExistsException(path.toString(), null, reason);
    }

    private static void backoff(int attempt) throws InterruptedIOException {
        long base = CONFLICT_BACKOFF_MS << (attempt - 1);
        try {
            Thread.sleep(base + ThreadLocalRandom.current().nextLong(base));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while retrying a conflicting conditional put");
        }
    }
}
