// src/core/file_safety.h: an output file a user names is written by temporary file and rename
// only over a regular file or nothing (directories, links, devices, FIFOs refused by name and
// left as they were, with every spelling of the path); whole-file reads refuse what is not a
// regular file of bounded size; appends are whole or not at all, on a real full file system
// (a small tmpfs, where this process may mount one).
#include "core/file_safety.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace vt {
namespace {
namespace fs = std::filesystem;

class FileSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vt_file_safety_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  // A tmpfs of `kib` KiB at dir_/fs, or false where this process cannot mount one.
  bool small_fs(int kib) {
    mnt_ = (fs::path(dir_) / "fs").string();
    fs::create_directory(mnt_);
    const std::string opts = "size=" + std::to_string(kib) + "k";
    mounted_ = ::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
    return mounted_;
  }
  // No temporary file of write_output_file left in `d`.
  void expect_no_tmp(const fs::path& d) {
    for (const auto& e : fs::directory_iterator(d))
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  std::string dir_, mnt_;
  bool mounted_ = false;
};

TEST_F(FileSafety, OutputFileIsWrittenNewOrOverARegularFile) {
  const fs::path p = fs::path(dir_) / "out.json";
  ASSERT_TRUE(write_output_file(p.string(), "one\n", "--out").ok());
  EXPECT_EQ(read(p), "one\n");
  ASSERT_TRUE(write_output_file(p.string(), "two\n", "--out").ok());
  EXPECT_EQ(read(p), "two\n");
  // Relative, with '.' and '..' in the folder.
  const fs::path cwd = fs::current_path();
  fs::create_directory(fs::path(dir_) / "sub");
  fs::current_path(fs::path(dir_) / "sub");
  EXPECT_TRUE(write_output_file("./../out.json", "three\n", "--out").ok());
  fs::current_path(cwd);
  EXPECT_EQ(read(p), "three\n");
  expect_no_tmp(dir_);
}

TEST_F(FileSafety, OutputOverSpecialFilesDirectoriesAndLinksIsRefusedByName) {
  const fs::path d = fs::path(dir_);
  fs::create_directory(d / "adir");
  write(d / "target", "keep me\n");
  fs::create_symlink(d / "target", d / "link");
  fs::create_symlink(d / "nowhere", d / "dangling");
  fs::create_directory_symlink(d / "adir", d / "dirlink");
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  struct Case {
    std::string path, kind;
  };
  const Case cases[] = {
      {"/dev/full", "a character device"},
      {"/dev/null", "a character device"},
      {(d / "adir").string(), "a directory"},
      {(d / "adir/").string(), "names a directory"},
      {(d / "adir/.").string(), "names a directory"},
      {(d / "adir/..").string(), "names a directory"},
      {(d / "link").string(), "a symbolic link"},
      {(d / "dangling").string(), "a symbolic link"},
      {(d / "dirlink").string(), "a symbolic link"},
      {(d / "fifo").string(), "a FIFO"},
      {(d / "missing/out.json").string(), "does not exist"},
      {(d / "target/out.json").string(), "is not a directory"},
  };
  struct stat full_before {};
  ASSERT_EQ(::lstat("/dev/full", &full_before), 0);
  for (const Case& c : cases) {
    absl::Status st = write_output_file(c.path, "x\n", "--out");
    EXPECT_FALSE(st.ok()) << c.path;
    EXPECT_NE(st.message().find("--out " + c.path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.kind), std::string::npos) << c.path << ": " << st.message();
  }
  struct stat full_after {};
  ASSERT_EQ(::lstat("/dev/full", &full_after), 0);
  EXPECT_TRUE(S_ISCHR(full_after.st_mode));
  EXPECT_EQ(full_after.st_rdev, full_before.st_rdev);
  EXPECT_EQ(read(d / "target"), "keep me\n");  // never written through the link
  EXPECT_TRUE(fs::is_symlink(d / "link"));
  EXPECT_TRUE(fs::is_empty(d / "adir"));
  expect_no_tmp(d);
}

TEST_F(FileSafety, OutputOnAFullFileSystemLeavesTheOldFileAndNoTemporary) {
  if (!small_fs(64)) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const fs::path p = fs::path(mnt_) / "out.json";
  ASSERT_TRUE(write_output_file(p.string(), "old\n", "--out").ok());
  for (size_t bytes : {size_t{70} << 10, size_t{1} << 20}) {
    absl::Status st = write_output_file(p.string(), std::string(bytes, 'x'), "--out");
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("--out " + p.string()), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("full"), std::string::npos) << st.message();
    EXPECT_EQ(read(p), "old\n");
    expect_no_tmp(mnt_);
  }
}

TEST_F(FileSafety, AppendIsWholeOrNothingOnAFullFileSystem) {
  if (!small_fs(64)) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const fs::path p = fs::path(mnt_) / "log.jsonl";
  const int fd = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string line = std::string(999, 'a') + "\n";
  int err = 0, lines = 0;
  while ((err = append_whole(fd, line)) == 0) ++lines;
  EXPECT_EQ(err, ENOSPC);
  EXPECT_GT(lines, 10);
  // The file holds whole lines only, and appends go on from there (a smaller record fits).
  EXPECT_EQ(fs::file_size(p), static_cast<uintmax_t>(lines) * line.size());
  int small = 0;
  while (append_whole(fd, "b\n") == 0) ++small;
  ::close(fd);
  const std::string text = read(p);
  EXPECT_EQ(text.size(), static_cast<size_t>(lines) * line.size() + 2 * static_cast<size_t>(small));
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\0'), std::string::npos);  // no hole where a torn record was cut
}

TEST_F(FileSafety, ReadRegularFileRefusesWhatIsNotOne) {
  const fs::path d = fs::path(dir_);
  write(d / "small.json", "{}");
  write(d / "big.json", std::string(2000, ' '));
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  absl::StatusOr<std::string> ok = read_regular_file((d / "small.json").string(), 1000, "--calibrate");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "{}");
  struct Case {
    std::string path, says;
  };
  const Case cases[] = {
      {dir_, "is a directory"},
      {dir_ + "/", "is a directory"},
      {(d / "fifo").string(), "is a FIFO"},  // opened without blocking, never read
      {"/dev/zero", "is a character device"},
      {"/dev/null", "is a character device"},
      {(d / "big.json").string(), "2000 bytes, more than the 1000"},
      {(d / "none.json").string(), "no such file"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> r = read_regular_file(c.path, 1000, "--calibrate");
    ASSERT_FALSE(r.ok()) << c.path;
    EXPECT_NE(r.status().message().find("--calibrate " + c.path + ": "), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace vt
