# SPDX-License-Identifier: MIT
# bench-plot.gp - doc/bench.png from scripts/bench.sh's data files.
# Variables (gnuplot -e): hit, thr (data files), out (png), cores.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1100,450 font ",10"
} else {
    set terminal png size 1100,450
}
set output out
set termoption noenhanced  # "bench_lru" is a name, not a subscript
set multiplot layout 1,2 title "ipcbyval import cache (bench_lru, ".cores." cores)"
set grid
set key off
set logscale x
set xlabel "cache entries"
set ylabel "open latency, cache hit (ns, median)"
set yrange [0:*]
plot hit using 1:2 with linespoints lw 2 pt 7
unset logscale x
set xlabel "threads (own key subset each)"
set ylabel "aggregate hits (millions / s)"
set logscale x 2
plot thr using 1:2 with linespoints lw 2 pt 7
unset multiplot
