#include "common/format/file_util.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(FileUtilTest, PathPieces) {
  EXPECT_EQ(ParentOf("a/b/c"), "a/b");
  EXPECT_EQ(ParentOf("a/b/"), "a");
  EXPECT_EQ(ParentOf("name"), ".");
  EXPECT_EQ(ParentOf("/name"), "/");
  EXPECT_EQ(ParentOf("/"), "/");
  EXPECT_EQ(BaseName("a/b/c"), "c");
  EXPECT_EQ(BaseName("c"), "c");
  EXPECT_EQ(BaseName("a/"), "");
  EXPECT_EQ(Join("a", "b"), "a/b");
  EXPECT_EQ(Join("a/", "b"), "a/b");
}

TEST(FileUtilTest, MakeListAndSyncFolders) {
  std::string root = testing::TempDir() + "/file_util.XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  const std::string folder = Join(root, "f");
  ASSERT_TRUE(MakeFolder(folder, root).ok());
  ASSERT_TRUE(MakeFolder(folder, root).ok());  // exists: fine
  std::ofstream(Join(folder, "b")) << "x";
  std::ofstream(Join(folder, "a")) << "x";
  auto names = ListFolder(folder);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(SyncFolder(folder).ok());

  auto missing = ListFolder(Join(root, "none"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(Join(root, "none") + ": list folder"),
            std::string::npos)
      << missing.status();
  absl::Status s = MakeFolder(Join(Join(folder, "a"), "sub"), Join(folder, "a"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("create folder"), std::string::npos) << s;
  EXPECT_FALSE(SyncFolder(Join(folder, "a")).ok());  // a file, not a folder

  for (const char* name : {"f/a", "f/b", "f"}) std::remove(Join(root, name).c_str());
  std::remove(root.c_str());
}

}  // namespace
}  // namespace psync
