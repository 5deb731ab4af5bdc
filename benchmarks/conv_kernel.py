"""A hand-scheduled tiled 3x3 int8 convolution (pad 1, stride 1) for NNP-1, as assembly.

The output is cut into tiles of `rows` output rows.  Each tile's input rows
(with their one-row halo, and the left/right padding filled by the DMA) go to
one IBUF half; the NU convolves them into one ABUF half; a second DMA channel
scatters the int32 result back to DDR in NCHW.  Tile t uses half t % 2, so
the load of tile t + 1 and the store of tile t - 1 overlap the convolution of
tile t.  Semaphores:
    s1, s2  input half h loaded          (load -> conv)
    s3, s4  conv on half h finished      (conv -> store)
    s5, s6  store of half h finished     (store -> next load into half h);
            the CU seeds each with one token so the first two loads go at once
The weights are loaded once, on the same channel just before the first input
tile, so queue order puts them ahead of the first convolution.

Channels must be multiples of the array size (32); rows need not divide H.
"""
from __future__ import annotations

ROWS = COLS = 32


def conv3x3_source(c: int = 64, o: int = 64, h: int = 56, w: int = 56, rows: int = 4) -> str:
    """Assembly for y[1, o, h, w] (int32) = conv3x3(x[1, c, h, w] int8, w[o, c, 3, 3] int8), pad 1."""
    if c % ROWS or o % COLS:
        raise ValueError("channels must be multiples of 32")
    cb, ob = c // ROWS, o // COLS
    ibuf_half = cb * (rows + 2) * (w + 2) * ROWS
    abuf_half = ob * rows * w * COLS * 4
    if 2 * ibuf_half > 256 * 1024 or 2 * abuf_half > 128 * 1024:
        raise ValueError(f"{rows} rows per tile do not fit IBUF/ABUF halves")
    out = [f"; conv3x3 {c}->{o} channels, {h}x{w}, {rows} output rows per tile",
           ".data", ".align 64",
           f".buffer x, int8, (1, {c}, {h}, {w})", f"    .space {c * h * w}",
           ".align 64",
           f'.buffer w, int8, ({o}, {c}, 3, 3), "split(0,32) split(2,32) reorder(0,2,4,5,3,1)"',
           f"    .space {o * c * 9}",
           ".align 64",
           f".buffer y, int32, (1, {o}, {h}, {w})", f"    .space {o * h * w * 4}",
           ".text",
           "    li r4, 0", f"    li r5, {ibuf_half}",          # IBUF halves
           "    li r6, 0", f"    li r7, {abuf_half}",          # ABUF halves
           "    li r8, 0",                                     # WBUF: all weights
           "    sem.signal s5", "    sem.signal s6"]
    out += _dma_flat("weights", "wbuf[r8]", "ddr[r9]", "w", o * c * 9)
    first = True
    for t, r0 in enumerate(range(0, h, rows)):
        th, half = min(rows, h - r0), t % 2
        out += _load_tile(t, r0, th, half, c, h, w, first)
        out += _conv_tile(t, th, half, cb, ob, w)
        out += _store_tile(t, r0, th, half, ob, h, w)
        first = False
    out += ["    barrier Q_ALL", "    halt"]
    return "\n".join(out) + "\n"


def _dims(prefix: str, values: list[int]) -> list[str]:
    return [f"    setpi dma.{prefix}{k}, {v}" for k, v in enumerate(values)]


def _dma_flat(what: str, dst: str, src: str, sym: str, nbytes: int) -> list[str]:
    return ([f"; {what}: one flat copy", f"    la r9, {sym}", "    setpi dma.elem, 1"]
            + _dims("size", [nbytes, 1, 1, 1]) + _dims("src_stride", [1, 0, 0, 0])
            + _dims("dst_stride", [1, 0, 0, 0]) + _dims("pad_lo", [0] * 4) + _dims("pad_hi", [0] * 4)
            + [f"    dma ch0, {dst}, {src}"])


def _load_tile(t: int, r0: int, th: int, half: int, c: int, h: int, w: int, first: bool) -> list[str]:
    top = 1 if r0 == 0 else 0
    bottom = 1 if r0 + th == h else 0
    src_row = r0 - 1 + top
    return ([f"; tile {t}: load input rows {src_row}..{r0 + th - bottom} into IBUF half {half}",
             f"    la r10, x + {src_row * w}", "    setpi dma.elem, 1"]
            + _dims("size", [ROWS, w + 2, th + 2, c // ROWS])
            + _dims("src_stride", [h * w, 1, w, ROWS * h * w])
            + _dims("dst_stride", [1, ROWS, (w + 2) * ROWS, (th + 2) * (w + 2) * ROWS])
            + _dims("pad_lo", [0, 1, top, 0]) + _dims("pad_hi", [0, 1, bottom, 0])
            + ["    setpi dma.pad_value, 0",
               f"    dma ch0, ibuf[r{4 + half}], ddr[r10], wait=s{5 + half}, signal=s{1 + half}"])


def _conv_tile(t: int, th: int, half: int, cb: int, ob: int, w: int) -> list[str]:
    params = {"in_h": th + 2, "in_w": w + 2, "in_cb": cb, "out_h": th, "out_w": w,
              "out_cb": ob, "k_h": 3, "k_w": 3}
    return ([f"; tile {t}: convolve IBUF half {half} into ABUF half {half}"]
            + [f"    setpi nu.{k}, {v}" for k, v in params.items()]
            + [f"    nu.conv nu0, r{6 + half}, r{4 + half}, r8, wait=s{1 + half}, signal=s{3 + half}"])


def _store_tile(t: int, r0: int, th: int, half: int, ob: int, h: int, w: int) -> list[str]:
    return ([f"; tile {t}: store ABUF half {half} to y rows {r0}..{r0 + th - 1} (NCHW int32)",
             f"    la r11, y + {r0 * w * 4}", "    setpi dma.elem, 4"]
            + _dims("size", [COLS, w, th, ob])
            + _dims("src_stride", [4, COLS * 4, w * COLS * 4, th * w * COLS * 4])
            + _dims("dst_stride", [h * w * 4, 4, w * 4, COLS * h * w * 4])
            + _dims("pad_lo", [0] * 4) + _dims("pad_hi", [0] * 4)
            + [f"    dma ch1, ddr[r11], abuf[r{6 + half}], wait=s{3 + half}, signal=s{5 + half}"])
