# SPDX-License-Identifier: MIT
# bench-plot.gp - doc/bench.png from scripts/bench.sh's data files.
# Variables (gnuplot -e): hit, thr (data files), out (png), cores; hit2,
# thr2 (optional): the GPU host's, from doc/bench-gpu-lru.txt.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1100,450 font ",10"
} else {
    set terminal png size 1100,450
}
set output out
set termoption noenhanced  # "bench_lru" is a name, not a subscript
have2 = exists("hit2")
here = "this machine (".cores." cores)"
set multiplot layout 1,2 title "ipcbyval import cache (bench_lru)"
set grid
if (have2) { set key top left } else { set key off }
set logscale x
set xlabel "cache entries (uniform random keys)"
set ylabel "open latency, cache hit (ns, median)"
set yrange [0:*]
if (have2) {
    plot hit using 1:2 with linespoints lw 2 pt 7 title here, \
         hit2 using 1:2 with linespoints lw 2 pt 5 title "H100 host (16 cores)"
} else {
    plot hit using 1:2 with linespoints lw 2 pt 7
}
unset logscale x
set xlabel "threads (own key subset each)"
set ylabel "aggregate hits (millions / s)"
set logscale x 2
if (have2) {
    plot thr using 1:2 with linespoints lw 2 pt 7 title here, \
         thr2 using 1:2 with linespoints lw 2 pt 5 title "H100 host (16 cores)"
} else {
    plot thr using 1:2 with linespoints lw 2 pt 7
}
unset multiplot
