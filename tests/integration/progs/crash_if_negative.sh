#!/bin/sh
# Crashes (exit 3) when its parameter is negative, else reports score = x.
case "$1" in
    -*) echo "crashing on purpose" >&2; exit 3 ;;
esac
jizhi report --step 1 score="$1"
