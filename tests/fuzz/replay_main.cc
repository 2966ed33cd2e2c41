// Runs a fuzz target over every file of the directories (or files) it is given: the seed
// corpus as a regression test in the ordinary build, where libFuzzer is not linked.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int Replay(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return -1;
  }
  if (S_ISDIR(info.st_mode)) {
    DIR* dir = opendir(path.c_str());
    int count = 0;
    for (dirent* entry = readdir(dir); entry != nullptr; entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      const int replayed = Replay(path + "/" + name);
      if (replayed < 0) return replayed;
      count += replayed;
    }
    closedir(dir);
    return count;
  }
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int total = 0;
  for (int i = 1; i < argc; ++i) {
    const int replayed = Replay(argv[i]);
    if (replayed < 0) return 1;
    total += replayed;
  }
  std::printf("replayed %d inputs\n", total);
  return total > 0 ? 0 : 1;
}
