package io.loglake.spark;

import java.io.Serializable;
import java.util.ArrayList;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * An aggregate over one struct column: the non-null structs it sees, while they are at most
 * {@code maxRows} rows of at most {@code maxBytes} bytes in all (binary and string fields by their
 * length, other fields 8 bytes each, 32 more per row); beyond, it gives up and keeps only the count.
 *
 * <p>Its result is a struct {@code <rows: array<struct>, seen: bigint>}: {@code rows} null when it gave
 * up. loglake puts it in a pass's observation ({@code loglake.records.parse.counted}), over the quarantined
 * records of the pass: while they are few, the driver receives them with the pass's counts and writes
 * the quarantine from them, with no second pass over the range. Beyond the bound the buffer holds no
 * rows (the driver's memory stays bounded whatever the bad fraction) and the caller reads them again.
 *
 * <p>Partial buffers merge in any order: the rows' order in the result is not defined.
 */
public final class BoundedCollect extends Aggregator<Row, BoundedCollect.Buffer, Row> {
    private static final long serialVersionUID = 1L;
    private static final int ROW_OVERHEAD = 32;

    /** What one task (or a merge of tasks) has gathered. */
    public static final class Buffer implements Serializable {
        private static final long serialVersionUID = 1L;
        long seen;
        long bytes;
        ArrayList<Row> rows = new ArrayList<>();  // null once the bound is passed
    }

    private final StructType rowType;
    private final int maxRows;
    private final long maxBytes;

    public BoundedCollect(StructType rowType, int maxRows, long maxBytes) {
        this.rowType = rowType;
        this.maxRows = maxRows;
        this.maxBytes = maxBytes;
    }

    /**
     * The aggregate over {@code input}, a struct column of type {@code rowTypeDdl} (its fields in DDL,
     * "a int, b binary"): what {@code Dataset.observe} and {@code agg} take.
     */
    public static Column column(Column input, String rowTypeDdl, int maxRows, long maxBytes) {
        StructType rowType = StructType.fromDDL(rowTypeDdl);
        StructType in = new StructType().add("row", rowType, true);
        return functions.udaf(new BoundedCollect(rowType, maxRows, maxBytes), Encoders.row(in)).apply(input);
    }

    @Override
    public Buffer zero() {
        return new Buffer();
    }

    @Override
    public Buffer reduce(Buffer b, Row in) {
        if (in.isNullAt(0)) {
            return b;
        }
        b.seen++;
        if (b.rows != null) {
            Row row = in.getStruct(0);
            b.bytes += size(row);
            b.rows.add(row);
            bound(b);
        }
        return b;
    }

    @Override
    public Buffer merge(Buffer a, Buffer b) {
        a.seen += b.seen;
        if (a.rows == null || b.rows == null) {
            a.rows = null;
        } else {
            a.rows.addAll(b.rows);
            a.bytes += b.bytes;
            bound(a);
        }
        return a;
    }

    @Override
    public Row finish(Buffer b) {
        return RowFactory.create(b.rows == null ? null : b.rows.toArray(new Row[0]), b.seen);
    }

    @Override
    public Encoder<Buffer> bufferEncoder() {
        return Encoders.javaSerialization(Buffer.class);
    }

    @Override
    public Encoder<Row> outputEncoder() {
        return Encoders.row(new StructType()
                .add("rows", DataTypes.createArrayType(rowType, false), true)
                .add("seen", DataTypes.LongType, false));
    }

    private void bound(Buffer b) {
        if (b.rows.size() > maxRows || b.bytes > maxBytes) {
            b.rows = null;  // given up: only the count from here on
            b.bytes = 0;
        }
    }

    private static long size(Row row) {
        long n = ROW_OVERHEAD;
        for (int i = 0; i < row.length(); i++) {
            Object v = row.get(i);
            if (v instanceof byte[] bytes) {
                n += bytes.length;
            } else if (v instanceof String s) {
                n += s.length();
            } else {
                n += 8;
            }
        }
        return n;
    }
}
