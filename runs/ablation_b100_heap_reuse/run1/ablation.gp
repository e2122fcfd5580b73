# gnuplot script written by mlo ablate; `gnuplot /tmp/fc/relu_run1/ablation.gp` redraws the chart
if (!exists("outfile")) outfile = '/tmp/fc/relu_run1/ablation.png'
set terminal pngcairo size 1100,620 noenhanced font ',11'
set output outfile
set title 'Memory ablation: ablation_lt_cifar10_resnet50, batch 100, cpu (SYNTHETIC data)'
set ylabel 'peak per meta-iteration (MiB, exact meter)'
set yrange [0:*]
set offsets 0,0,graph 0.16,0
set grid ytics
set key top center horizontal
set style fill solid 0.7 border -1
set boxwidth 0.6
set xtics rotate by -20
set arrow from graph 0, first 2640.8 to graph 1, first 2640.8 nohead dt 2 lc 'gray40'
plot '/tmp/fc/relu_run1/ablation.dat' using 0:2:5:xtic(1) with boxes lc rgb variable title 'peak (gray: saves under 1%)', \
     '' using 0:2:(sprintf("%.0f MiB\n%s", $2, strcol(4))) with labels offset 0,1.6 notitle, \
     '' using 0:3:(0.3):(0) with vectors nohead lw 3 lc rgb '#c0392b' title 'floor (a lower bound of the peak)', \
     '' using ($0-0.3):3:(0.6):(0) with vectors nohead lw 3 lc rgb '#c0392b' notitle
