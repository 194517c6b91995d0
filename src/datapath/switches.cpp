#include "datapath/switches.h"

namespace tandem::datapath {

const DataPathSwitch* find_data_path_switch(const std::string& flag) {
  for (const DataPathSwitch& s : kDataPathSwitches) {
    if (flag == s.flag) return &s;
  }
  return nullptr;
}

DataPathSwitches resolve_switches(DataPathSwitches s) {
  for (const DataPathSwitch& sw : kDataPathSwitches) {
    if (sw.needs == nullptr) continue;
    const DataPathSwitch* container = find_data_path_switch(sw.needs);
    if (container != nullptr && !(s.*(container->field))) s.*(sw.field) = false;
  }
  return s;
}

Result<DataPathSwitches> apply_switch_flags(const std::vector<std::string>& flags) {
  DataPathSwitches s;
  for (const std::string& f : flags) {
    const DataPathSwitch* sw = find_data_path_switch(f);
    if (sw == nullptr) {
      return Status::invalid_argument("'" + f +
                                      "' is not one of the engine's switches; these are: " + switch_flags_list());
    }
    s.*(sw->field) = false;
  }
  return resolve_switches(s);
}

std::string switch_flags_list() {
  std::string out;
  for (const DataPathSwitch& s : kDataPathSwitches) out += (out.empty() ? "" : ", ") + std::string(s.flag);
  return out;
}

std::string switches_markdown() {
  std::string out =
      "| flag | turns off (on by default) | what it measures | also off with |\n"
      "|---|---|---|---|\n";
  for (const DataPathSwitch& s : kDataPathSwitches) {
    out += "| `" + std::string(s.flag) + "` | " + s.mechanism + " | " + s.measures + " | " +
           (s.needs != nullptr ? "`" + std::string(s.needs) + "`" : std::string("–")) + " |\n";
  }
  return out;
}

}  // namespace tandem::datapath
