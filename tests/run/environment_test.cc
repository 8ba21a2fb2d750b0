// Reading a process's place in a distributed run from torchrun's and SLURM's variables.
#include "lib/run/environment.h"

#include <gtest/gtest.h>

#include <map>

namespace kiln::run {
namespace {

GetEnv From(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

TEST(WorkerEnvironment, NothingSetIsOneProcess) {
  auto env = ReadEnvironment(From({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->distributed());
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->source, "single");
}

TEST(WorkerEnvironment, TorchrunVariables) {
  auto env = ReadEnvironment(From({{"RANK", "3"},
                                   {"WORLD_SIZE", "4"},
                                   {"LOCAL_RANK", "1"},
                                   {"MASTER_ADDR", "10.1.2.3"},
                                   {"MASTER_PORT", "29511"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->distributed());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "10.1.2.3");
  EXPECT_EQ(env->master_port, 29511);
  EXPECT_EQ(env->source, "torchrun");
  auto own =
      ReadEnvironment(From({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"KILN_LOCAL_WORKERS", "1"}}));
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->source, "kiln");
}

TEST(WorkerEnvironment, SlurmVariablesWithTheFirstNodeAsMaster) {
  auto env = ReadEnvironment(From({{"SLURM_PROCID", "5"},
                                   {"SLURM_NTASKS", "8"},
                                   {"SLURM_LOCALID", "1"},
                                   {"SLURM_NODELIST", "gpu[007-010,12],cpu1"},
                                   {"SLURM_JOB_ID", "4242117"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "gpu007");
  EXPECT_EQ(env->master_port,
            15000 + 2117);  // Lightning's rule: 15000 + the job id's last 4 digits
}

TEST(WorkerEnvironment, TorchrunWinsOverSlurmAndOneSlurmTaskIsOneProcess) {
  auto both = ReadEnvironment(
      From({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->source, "torchrun");
  EXPECT_EQ(both->world_size, 2);
  auto one = ReadEnvironment(
      From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_NODELIST", "n1"}}));
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->distributed());
}

TEST(WorkerEnvironment, MalformedValuesNameTheVariable) {
  auto bad_rank = ReadEnvironment(From({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(std::string(bad_rank.status().message()).find("RANK='x'"), std::string::npos)
      << bad_rank.status();
  auto outside = ReadEnvironment(From({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(std::string(outside.status().message()).find("rank 2 is outside the world of 2"),
            std::string::npos);
  auto port = ReadEnvironment(From({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}));
  ASSERT_FALSE(port.ok());
  EXPECT_NE(std::string(port.status().message()).find("MASTER_PORT=70000"), std::string::npos);
}

TEST(WorkerEnvironment, SlurmNodeLists) {
  EXPECT_EQ(FirstSlurmHost("node1").value(), "node1");
  EXPECT_EQ(FirstSlurmHost("node1,node2").value(), "node1");
  EXPECT_EQ(FirstSlurmHost("rack[3-4]-n[01-02]").value(), "rack3-n01");
  EXPECT_EQ(FirstSlurmHost("a[09,11-12]").value(), "a09");
  EXPECT_FALSE(FirstSlurmHost("").ok());
  EXPECT_FALSE(FirstSlurmHost("a[1-2").ok());
}

}  // namespace
}  // namespace kiln::run
