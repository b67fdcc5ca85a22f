// The parameter-name patterns shared by trainable sets, parameter groups and LoRA targets
// (core/base/name_pattern.h): whole-name globs and '/'-aligned tails.
#include <gtest/gtest.h>

#include "core/base/name_pattern.h"

namespace fjit {
namespace {

TEST(NamePattern, MatchesWholeNamesAndSlashAlignedTails) {
  EXPECT_TRUE(name_matches("block3/attn/qkv/w", "block3/attn/qkv/w"));
  EXPECT_TRUE(name_matches("attn/qkv/w", "block3/attn/qkv/w"));
  EXPECT_TRUE(name_matches("w", "block3/attn/qkv/w"));
  EXPECT_FALSE(name_matches("tn/qkv/w", "block3/attn/qkv/w"));  // a tail must start at a '/'
  EXPECT_FALSE(name_matches("attn/qkv", "block3/attn/qkv/w"));  // and run to the end
  EXPECT_FALSE(name_matches("", "w"));
}

TEST(NamePattern, GlobsCrossSlashes) {
  EXPECT_TRUE(name_matches("*/b", "block0/mlp/fc/b"));
  EXPECT_FALSE(name_matches("*/b", "block0/mlp/fc/w"));
  EXPECT_TRUE(name_matches("norm*", "norm/g"));
  EXPECT_TRUE(name_matches("norm*", "block0/norm1/g"));
  EXPECT_TRUE(name_matches("block1/*", "block1/attn/out/w"));
  EXPECT_FALSE(name_matches("block1/*", "block10/attn/out/w"));
  EXPECT_TRUE(name_matches("block[02]/*/w", "block2/mlp/fc/w"));
  EXPECT_FALSE(name_matches("block[02]/*/w", "block1/mlp/fc/w"));
  EXPECT_TRUE(name_matches("*lora_?", "block0/attn/qkv/lora_a"));
}

TEST(NamePattern, AnyOfSeveral) {
  EXPECT_TRUE(name_matches_any({"*/b", "*/g"}, "norm/g"));
  EXPECT_FALSE(name_matches_any({"*/b", "*/g"}, "tok/table"));
  EXPECT_FALSE(name_matches_any({}, "tok/table"));
}

}  // namespace
}  // namespace fjit
