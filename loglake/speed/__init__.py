"""The speed layer: its streams started, stopped and watched from outside (``control``), and its
Spark half: the speed application (``app``), one stream's job (``job``), the stream
(``stream``), where it reads from (``position``, ``checkpoint``) and its micro-batch writer
(``writer``)."""
