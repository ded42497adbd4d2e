"""The child process of figures.StaticDrawer (ADR 0237): draws Vega-Lite specs to SVG with vl-convert while
the parent builds the next figure's spec. vl-convert holds the GIL for a whole conversion, so a thread could not
overlap the two; a process can.

Run as ``python -m specjoule.report.vlc_worker VEGA_LITE_VERSION``. Reads frames (8-byte little-endian length,
then a pickle) from stdin: a spec dict to draw, or None to stop; answers each in order on stdout with
``("svg", svg_text, seconds)`` or ``("error", message)``. Imports nothing but vl-convert and the standard library.
"""

from __future__ import annotations

import pickle
import struct
import sys
import time
from typing import Any, BinaryIO

HEADER = struct.Struct("<Q")


def read_frame(stream: BinaryIO) -> Any:
    """The next frame's object; raises EOFError at the end of the stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        raise EOFError
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    return pickle.loads(body)


def write_frame(stream: BinaryIO, obj: Any) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def main(vl_version: str) -> None:
    import vl_convert as vlc

    # Starts V8 and loads Vega-Lite (most of a first conversion's second) while the parent is still building
    # figures; compiling draws nothing, so no renderer state is touched before the first real SVG.
    vlc.vegalite_to_vega({"mark": "point"}, vl_version=vl_version)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            spec = read_frame(stdin)
        except EOFError:
            return
        if spec is None:
            return
        t0 = time.perf_counter()
        try:
            svg = vlc.vegalite_to_svg(spec, vl_version=vl_version)
        except Exception as err:  # handed back: the parent raises it where an in-process conversion would
            write_frame(stdout, ("error", str(err)))
            continue
        write_frame(stdout, ("svg", svg, time.perf_counter() - t0))


if __name__ == "__main__":
    main(sys.argv[1])
