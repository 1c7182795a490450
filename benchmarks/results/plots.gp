set terminal pngcairo size 900,560 noenhanced
set output 'w1.png'
set title 'W1 churn: ns per (cancel + add) vs pending timers'
set logscale xy
set format x '10^%L'
set xlabel 'pending timers N'
set ylabel 'ns per pair (thread CPU)'
set key top left
set grid
plot for [i=2:*] 'w1.dat' using 1:i with linespoints lw 2 title columnhead(i)
set output 'w2.png'
unset logscale
set logscale y
set grid
set title 'W2 expire-all, cold: firing lateness (ms; p50 and p99 the median run, max the worst)'
set style data histograms
set style fill solid 0.8
set boxwidth 0.9
set xlabel ''
set xtics nomirror rotate by -20 left offset -1.5,0
set bmargin 5
set ylabel 'lateness ms (log)'
set key top left
plot 'w2.dat' skip 1 using 2:xtic(1) title 'p50' noenhanced, '' skip 1 using 3 title 'p99', '' skip 1 using 4 title 'max'
