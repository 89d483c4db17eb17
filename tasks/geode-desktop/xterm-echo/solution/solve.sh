#!/usr/bin/env bash
# The oracle solves this task through the computer tool (solution/computer.json); this
# script is what the same actions amount to, for a reader.
echo geode-desktop-ok > /app/answer.txt
