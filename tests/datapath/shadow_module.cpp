// The data path in a module loaded with RTLD_LOCAL: its definitions of ggml's functions are not
// the ones the process resolves, so its self-check must fail.
#include <string>

#include "datapath/self_check.h"

extern "C" const char* tandem_shadow_check() {
  static std::string message;
  const tandem::Status s = tandem::datapath::check_interposition();
  message = s.is_ok() ? "" : s.message();
  return message.c_str();
}
