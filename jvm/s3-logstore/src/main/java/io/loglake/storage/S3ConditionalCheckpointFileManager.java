package io.loglake.storage;

import java.io.ByteArrayOutputStream;
import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import org.apache.hadoop.fs.store.audit.AuditSpan;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark's checkpoint files on {@code s3a://} created the way {@link S3ConditionalLogStore} creates
 * Delta's commit files: one conditional PutObject ({@code If-None-Match: *}), which the store
 * refuses when another writer created the file first. Set as
 * {@code spark.sql.streaming.checkpointFileManagerClass}.
 *
 * <p>A streaming query plans micro-batch N by creating {@code offsets/N} (its offset range) and
 * finishes it by creating {@code commits/N}; the checkpoint's {@code metadata} (its id) is created
 * once. Spark's default manager writes a temporary file and renames it, and S3A's rename checks
 * that the target is absent and then copies: a query that pauses between the two (a stopped
 * process, a long collection) replaces the file another query created meanwhile, and one batch id
 * then names two offset ranges, one of which the tables may never see. Created conditionally, the
 * second query's file is refused: Spark fails it ("multiple streaming queries are concurrently
 * using" the checkpoint) and the first plan stands.
 *
 * <p>Everything else (reads, listings, deletes, files Spark may overwrite, other schemes) is the
 * parent's.
 */
public class S3ConditionalCheckpointFileManager extends FileContextBasedCheckpointFileManager {

    /** The configuration key that names this class. */
    public static final String CONF_KEY = "spark.sql.streaming.checkpointFileManagerClass";

    private final FileSystem fs;

    public S3ConditionalCheckpointFileManager(Path path, Configuration hadoopConf) throws IOException {
        super(path, hadoopConf);
        this.fs = path.getFileSystem(hadoopConf);
    }

    @Override
    public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        if (overwriteIfPossible || !(fs instanceof S3AFileSystem)) {
            return super.createAtomic(path, overwriteIfPossible);
        }
        return new ConditionalStream((S3AFileSystem) fs, fs.makeQualified(path), new ByteArrayOutputStream());
    }

    /**
     * Holds the file's bytes (a checkpoint file is small) and puts them, once, when closed.
     * Cancelled, it puts nothing: no partial file is ever visible.
     */
    static final class ConditionalStream extends CheckpointFileManager.CancellableFSDataOutputStream {
        private final S3AFileSystem fs;
        private final Path path;
        private final ByteArrayOutputStream buffer;
        private boolean done;

        ConditionalStream(S3AFileSystem fs, Path path, ByteArrayOutputStream buffer) {
            super(buffer);
            this.fs = fs;
            this.path = path;
            this.buffer = buffer;
        }

        @Override
        public synchronized void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            super.close();
            AuditSpan span = fs.createSpan("loglake_checkpoint_file", path.toString(), null);
            try {
                S3ConditionalLogStore.createIfAbsent(fs, path, buffer.toByteArray());
            } catch (java.nio.file.FileAlreadyExistsException e) {
                // The type Spark's metadata logs catch to say that another query wrote the file.
                FileAlreadyExistsException refused = new FileAlreadyExistsException(
                    path + " was created by another streaming query first: " + e.getReason());
                refused.initCause(e);
                throw refused;
            } finally {
                span.close();
            }
        }

        @Override
        public synchronized void cancel() {
            done = true;
        }
    }
}
