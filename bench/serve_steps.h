// The --serve protocol of the bench step programs (model_step, dpsgd_step, libtorch_step),
// which bench/step_rounds.py keeps running as workers: without --serve, one timing of `steps`
// steps; with it, one timing for each line of stdin that holds a step count, until a count
// below 1 or the end of input. time_steps(n) times n steps and prints its STEP_US line.
#pragma once

#include <cstdio>
#include <cstdlib>

template <class TimeSteps>
int run_or_serve(bool serve, int steps, TimeSteps&& time_steps) {
  if (!serve) {
    time_steps(steps);
    return 0;
  }
  char line[64];
  while (std::fgets(line, sizeof line, stdin)) {
    const int n = std::atoi(line);
    if (n < 1) break;
    time_steps(n);
  }
  return 0;
}
