#!/bin/sh
# A shell objective: a noisy bowl whose maximum is at x=0.3, y=-0.2.
# It reports `score` after each of 5 "epochs" with `jizhi report`.
# Parameters arrive as arguments through {x} and {y} placeholders.
set -e
x=$1
y=$2
for step in 1 2 3 4 5; do
    score=$(awk -v x="$x" -v y="$y" -v s="$step" \
        'BEGIN { printf "%.6f", 1 - (x-0.3)^2 - (y+0.2)^2 - 0.1/s }')
    jizhi report --step "$step" score="$score" epoch="$step"
done
