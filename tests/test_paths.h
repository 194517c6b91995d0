// Where a test finds the repository, the build's tandem and its scratch space. Every test target
// includes this header first (tests/CMakeLists.txt); the values come from a source generated in the
// build folder, not from the compiler's command line, so a test's object is the same in every
// clone and ccache serves it to the next (CI's clean clone compiles only that one file again).
#pragma once

namespace tandem::testing::paths {
const char* tandem_binary();  // the build's tandem
const char* test_tmp();       // scratch space under the build folder
const char* source_dir();     // the repository
const char* status_shots();   // where the status-page test leaves its screenshots
}  // namespace tandem::testing::paths

#define TANDEM_BINARY (::tandem::testing::paths::tandem_binary())
#define TANDEM_TEST_TMP (::tandem::testing::paths::test_tmp())
#define TANDEM_SOURCE_DIR (::tandem::testing::paths::source_dir())
#define TANDEM_STATUS_SHOTS (::tandem::testing::paths::status_shots())
