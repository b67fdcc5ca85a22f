// The configuration table (core/base/config.def): README.md lists exactly its variables, a
// name cannot be declared twice, each kind parses as config.def says, and the values reach the
// plan, which records how it runs (overlap mode, fusion).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/config.h"
#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::EnvVar;

std::string readme() {
  std::ifstream f(std::string(FJIT_SOURCE_DIR) + "/README.md");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// README.md's "## Environment variables" section: its text, and the FJIT_* names in the first
// column of each of its tables, table by table. The rule the README keeps: the first table
// lists the library's variables (the table's rows), the second the tests', benchmarks' and
// scripts' own, which the library never reads.
struct ReadmeSection {
  std::string text;
  std::vector<std::set<std::string>> tables;
};

ReadmeSection environment_section() {
  std::istringstream in(readme());
  ReadmeSection section;
  bool inside = false, in_table = false;
  const std::regex name("FJIT_[A-Z0-9_]+");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) {
      if (inside) break;
      inside = line == "## Environment variables";
      continue;
    }
    if (!inside) continue;
    section.text += line + "\n";
    const bool row = line.rfind("|", 0) == 0;
    if (row && !in_table) section.tables.emplace_back();
    in_table = row;
    if (!row) continue;
    const std::string first = line.substr(1, line.find('|', 1) - 1);
    for (std::sregex_iterator it(first.begin(), first.end(), name), end; it != end; ++it)
      section.tables.back().insert(it->str());
  }
  return section;
}

std::set<std::string> table_names(bool foreign) {
  std::set<std::string> names;
  for (const config::Row& r : config::kRows)
    if ((r.kind == config::Kind::kForeign) == foreign) names.insert(std::string(r.name));
  return names;
}

TEST(Config, ReadmeListsExactlyTheTablesVariables) {
  const ReadmeSection s = environment_section();
  ASSERT_EQ(s.tables.size(), 2u) << "README.md's \"Environment variables\": a table of the "
                                    "library's variables, then one of the tests' and tools'";
  const std::set<std::string> table = table_names(false);
  for (const std::string& n : table)
    EXPECT_TRUE(s.tables[0].count(n)) << n << " is in core/base/config.def but not in README.md";
  for (const std::string& n : s.tables[0])
    EXPECT_TRUE(table.count(n)) << n << " is in README.md's list but not in core/base/config.def";
  for (const std::string& n : s.tables[1])
    EXPECT_FALSE(table.count(n)) << n << " is read by the library: it belongs in the first table";
  for (const std::string& n : table_names(true))
    EXPECT_NE(s.text.find("`" + n + "`"), std::string::npos) << n << " is not named in README.md";
}

// Two rows that share a name: the check config.h runs on its table at build time.
constexpr config::Row kTwice[] = {
    {"FJIT_A", config::Kind::kFlag, 0, 0, 0, "", "", config::OnBad::kThrow, "one"},
    {"FJIT_B", config::Kind::kFlag, 0, 0, 0, "", "", config::OnBad::kThrow, "two"},
    {"FJIT_A", config::Kind::kText, 0, 0, 0, "", "", config::OnBad::kThrow, "three"},
};
static_assert(!config::names_distinct(kTwice));
static_assert(config::names_distinct(config::kRows));

TEST(Config, DescribeGivesEveryRowOnce) {
  const std::string text = config::describe();
  for (const config::Row& r : config::kRows) {
    const std::string cell = "| `" + std::string(r.name) + "` |";
    const size_t at = text.find(cell);
    EXPECT_NE(at, std::string::npos) << r.name;
    EXPECT_EQ(text.find(cell, at + 1), std::string::npos) << r.name;
  }
  EXPECT_NE(text.find("| `FJIT_OVERLAP` | how a pmap's all-reduces overlap its backward pass; "
                      "0 (off), schedule, or 1 (worker) | 0 |"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("| `FJIT_INTRA_OP_THREADS` |"), std::string::npos);
}

TEST(Config, ChoicesTakeEverySpellingAndReportTheRest) {
  EXPECT_EQ(config::choice_value(config::Id::checks, "2"), 2);
  EXPECT_EQ(config::choice_value(config::Id::log_level, "warning"), 3);
  EXPECT_EQ(config::choice_value(config::Id::log_level, "err"), 4);
  EXPECT_EQ(config::choice_value(config::Id::overlap, "yes"), -1);
  {
    EnvVar set("FJIT_CHECKS", "most");
    testing::LogCapture logs;
    EXPECT_EQ(config::checks(), static_cast<int>(CheckMode::user));
    EXPECT_TRUE(logs.contains("FJIT_CHECKS='most' is not one of off, user, all, fpe; using user"))
        << logs.text();
  }
  {
    EnvVar set("FJIT_LOG_LEVEL", "verbose");
    std::string warning;
    EXPECT_EQ(config::choice(config::Id::log_level, &warning), 2);  // info
    EXPECT_EQ(warning, "FJIT_LOG_LEVEL='verbose' is not one of trace, debug, info, warn, error, "
                       "critical, off; using info");
  }
  EnvVar set("FJIT_OVERLAP", "yes");
  try {
    config::overlap();
    ADD_FAILURE() << "FJIT_OVERLAP=yes accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "FJIT_OVERLAP must be 0 (off), schedule, or 1 (worker), got 'yes'");
  }
}

TEST(Config, FlagsTextsAndForeignVariables) {
  for (auto [text, on] : {std::pair{"1", true}, {"yes", true}, {"0", false}, {"", false}}) {
    EnvVar set("FJIT_STRICT_UNUSED", text);
    EXPECT_EQ(config::strict_unused(), on) << "'" << text << "'";
  }
  {
    EnvVar unset("FJIT_STRICT_UNUSED", nullptr);
    EXPECT_FALSE(config::strict_unused());
    EXPECT_FALSE(config::is_set(config::Id::strict_unused));
  }
  {
    EnvVar set("FJIT_DUMP_DIR", "/tmp/somewhere");
    EXPECT_EQ(config::dump_dir(), "/tmp/somewhere");
    EXPECT_TRUE(config::is_set(config::Id::dump_dir));
  }
  {
    EnvVar empty("PMIX_RANK", "");  // a launcher's variable counts as soon as it is set
    EXPECT_EQ(config::pmix_rank(), std::optional<std::string>(""));
  }
  EnvVar unset("PMIX_RANK", nullptr);
  EXPECT_EQ(config::pmix_rank(), std::nullopt);
}

// How a plan runs is decided once, when the jit or pmap is made, and recorded in the plan.
TEST(Config, ThePlanRecordsItsOverlapAndFusion) {
  auto step = [](const Params& p, const Tensor& x) {
    auto [loss, g] = value_and_grad([](const Params& q, const Tensor& y) {
      return mean(relu(matmul(y, q["w"])) * 2.0f);
    })(p, x);
    return std::tuple{p["w"] - pmean(g, "b")["w"] * 0.1f, pmean(loss, "b")};
  };
  const ArrayDict p{{"w", testing::random_f32({8, 4}, 1)}};
  const Array x = testing::random_f32({4, 8}, 2);
  auto made = [&](const Mesh& mesh, const char* overlap, const char* fusion) {
    EnvVar o("FJIT_OVERLAP", overlap), f("FJIT_FUSION", fusion);
    return pmap(mesh, "b", step);
  };
  {
    auto two = made(Mesh::threads(2), "worker", "0");  // the variables are gone from here on
    two(p, x);
    const Executable& exe = *two.jit_core().last_entry()->exe;
    EXPECT_EQ(exe.overlap, Overlap::worker);
    EXPECT_EQ(exe.fusion, Fusion::off);
    EXPECT_NE(exe.plan_string().find("; overlap worker, fusion off\n"), std::string::npos)
        << exe.plan_string();
  }
  {
    auto one = made(Mesh::threads(1), "schedule", "single");  // nothing to overlap with one
    one(p, x);
    const Executable& exe = *one.jit_core().last_entry()->exe;
    EXPECT_EQ(exe.overlap, Overlap::off);
    EXPECT_EQ(exe.fusion, Fusion::single);
  }
  PmapOptions o;
  o.jit.overlap = Overlap::schedule;
  o.jit.fusion = Fusion::gemm;
  EnvVar fusion("FJIT_FUSION", "0");  // an option that is set is not read from the environment
  auto set = pmap(Mesh::threads(2), "b", step, o);
  set(p, x);
  const Executable& exe = *set.jit_core().last_entry()->exe;
  EXPECT_EQ(exe.overlap, Overlap::schedule);
  EXPECT_EQ(exe.fusion, Fusion::gemm);
}

}  // namespace
}  // namespace fjit
