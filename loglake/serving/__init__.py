"""The serving view: batch below the watermark, speed above it. Its SQL is engine-neutral
(``sql``); Spark (``spark``) and Arrow without a JVM (``arrow``) read it."""
