#include "parallel/mpi_runtime.h"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/compile/executable.h"

namespace fjit {

bool launched_under_mpi() {
  // OpenMPI's mpiexec sets OMPI_COMM_WORLD_SIZE; PMI (MPICH, Slurm) and PMIx launchers set
  // the others. None of them is set for a plain run.
  return config::ompi_comm_world_size().has_value() || config::pmi_size().has_value() ||
         config::pmix_rank().has_value();
}

bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int mpi_world_rank() {
  if (!mpi_active()) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

namespace {

void finalize_at_exit() {
  // Someone (a test main, the user) may have finalised already; finalising twice is an error.
  if (mpi_active()) MPI_Finalize();
}

}  // namespace

void mpi_init_once(int* argc, char*** argv) {
  static std::once_flag once;
  std::call_once(once, [argc, argv] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;  // the user initialised MPI and owns its finalisation
    int provided = MPI_THREAD_SINGLE;
    // Steps measured slower under MPI_THREAD_SERIALIZED than under FUNNELED (bench/RESULTS.md,
    // "Overlapped all-reduces"): only a job whose collectives run on a worker thread asks for it.
    // A malformed FJIT_OVERLAP counts as off here; JitOptions::resolved() reports it.
    bool worker = false;
    try {
      worker = config::overlap() == static_cast<int>(Overlap::worker);
    } catch (const std::invalid_argument&) {
    }
    const int wanted = worker ? MPI_THREAD_SERIALIZED : MPI_THREAD_FUNNELED;
    if (MPI_Init_thread(argc, argv, wanted, &provided) != MPI_SUCCESS) {
      log().critical("MPI_Init_thread failed");
      log().flush();
      std::abort();
    }
    if (provided < MPI_THREAD_FUNNELED) {
      log().critical("MPI gives thread level {}; fjit needs MPI_THREAD_FUNNELED", provided);
      log().flush();
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::atexit(finalize_at_exit);
  });
}

bool mpi_serialized_threads() {
  if (!mpi_active()) return false;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_SERIALIZED;
}

namespace {

std::string describe_current_exception() {
  std::exception_ptr e = std::current_exception();
  if (!e) return "std::terminate called without an active exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    int status = 0;
    char* name = abi::__cxa_demangle(typeid(ex).name(), nullptr, nullptr, &status);
    std::string text = fmt::format("uncaught exception ({}): {}",
                                   status == 0 ? name : typeid(ex).name(), ex.what());
    std::free(name);
    return text;
  } catch (...) {
    return "uncaught exception of a type not derived from std::exception";
  }
}

[[noreturn]] void terminate_job() {
  const int rank = mpi_world_rank();
  const std::string what = describe_current_exception();
  // stderr, not the logger: mpiexec forwards every rank's stderr to the terminal, while the
  // logger may point at a file nobody watches, or be what threw.
  std::fprintf(stderr, "[fjit] [critical] rank %d: %s; aborting the MPI job\n", rank,
               what.c_str());
  std::fflush(stderr);
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

}  // namespace

void install_mpi_terminate_handler() { std::set_terminate(terminate_job); }

int mpi_local_ranks() {
  if (!mpi_active()) return 1;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int n = 1;
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return n;
}

}  // namespace fjit
