// fjit_launch: runs a training command under mpirun over a host list and, when a rank or a
// host fails, drops the failed hosts and runs it again on the others from the latest
// complete checkpoint, a bounded number of times (parallel/launch/launcher.h says how).
//
//   build/examples/fjit_launch --hosts node1:2,node2:2 --max-restarts 2 --
//       build/examples/train_fashion_mnist --data-dir data --checkpoint-dir ck --checkpoint-every 50
//   (one command line)
//
// Exit codes: 0 the job ended normally; 2 bad command line; otherwise the last attempt's
// mpirun exit status (1 when it had none).
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "parallel/launch/launcher.h"

int main(int argc, char** argv) {
  using namespace fjit::launch;
  LaunchOptions options;
  try {
    bool help = false;
    options = parse_launch_args(std::vector<std::string>(argv + 1, argv + argc), help);
    if (help) {
      std::cout << launch_usage();
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "fjit_launch: " << e.what() << "\n" << launch_usage();
    return 2;
  }
  try {
    return run_elastic(options, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "fjit_launch: " << e.what() << "\n";
    return 1;
  }
}
