// cli::set_up_heap backs the heap with transparent huge pages where the kernel offers them: a
// vector of a few MB allocated after it lies in huge pages (the kernel's own count, AnonHugePages
// of /proc/self/smaps_rollup), and takes a fraction of the page faults it takes without.
#include "cli/heap_setup.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pipetune::cli {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// kB of anonymous memory in huge pages, from the kernel's summary of this process.
long anon_huge_kb() {
  std::istringstream in(read_file("/proc/self/smaps_rollup"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  return -1;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

TEST(HeapSetUp, AFewMegabytesLieInHugePagesWithAFractionOfThePageFaults) {
  const std::string thp = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.empty() || thp.find("[never]") != std::string::npos)
    GTEST_SKIP() << "this kernel offers no transparent huge pages";
  const long huge_before = anon_huge_kb();
  ASSERT_GE(huge_before, 0) << "no AnonHugePages in /proc/self/smaps_rollup";
  if (!set_up_heap())
    GTEST_SKIP() << "the heap is not glibc's malloc here (a sanitizer's allocator, or another C "
                    "library): set_up_heap does nothing";
  const long faults_before = minor_faults();
  std::vector<char> touched(16 << 20, 1);  // 16 MB: 4,096 pages of 4 KB
  const long faults = minor_faults() - faults_before;
  EXPECT_GE(anon_huge_kb() - huge_before, 8 << 10) << "under 8 MB of the 16 in huge pages";
  EXPECT_LT(faults, 1024) << faults << " page faults for 4,096 pages of 4 KB";
  EXPECT_EQ(touched[touched.size() - 1], 1);
}

}  // namespace
}  // namespace pipetune::cli
