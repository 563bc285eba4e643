"""Views of a schedule: step tables (:mod:`.show`), other tools' formats (:mod:`.interop`: MSCCL
XML, Chrome/Perfetto traces) and charts (:mod:`.plot`, matplotlib). They read the IR; the IR
does not know them."""
