// Must NOT compile: a jitted call with the wrong arguments. tests/CMakeLists.txt builds it
// once per FJIT_CASE and checks that the compiler's first error is fjit's own message, with
// no error from deep inside the library after it.
#include "fjit.h"

int main() {
  auto f = fjit::jit([](const fjit::Tensor& x, const fjit::Tensor& y) { return x + y; });
  fjit::Array a = fjit::Array::scalar(1.0f);
#if FJIT_CASE == 1
  f(a);  // one argument for two parameters
#elif FJIT_CASE == 2
  f(a, 3);  // an int where an Array belongs
#elif FJIT_CASE == 3
  fjit::Array out;
  f.run_into(out, a, a, a);  // three for two
#else
  auto g = fjit::pmap(fjit::Mesh::threads(2), "b",
                      [](const fjit::Tensor& x) { return fjit::psum(x, "b"); });
  g(a, a);  // two for one, through pmap
#endif
  return 0;
}
