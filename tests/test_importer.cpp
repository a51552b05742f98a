// The importer's reading of kernel sets: BackendBench folders to aten overloads to catalog
// operators, candidate file names to operators and variants, and the one-line verdicts. The
// actor itself runs against a real daemon in test_import.cpp.

#include "actors/library/importer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

contract::catalog_operator op(std::string name, std::string variant,
                              std::vector<std::string> overloads) {
  contract::catalog_operator out;
  out.name = std::move(name);
  out.variant = std::move(variant);
  out.dtypes = {"float32", "int64"};
  out.aten_overloads = std::move(overloads);
  return out;
}

contract::catalog_result catalog() {
  contract::catalog_result out;
  out.operators = {
      op("abs", "", {"aten.abs.default"}),
      op("nn.functional.relu", "", {"aten.relu.default"}),
      op("nn.functional.l1_loss", "", {"aten.abs.default", "aten.mean.default", "aten.sub.Tensor"}),
      op("softmax", "", {"aten._softmax.default"}),
      op("softmax", "with_dtype", {"aten._softmax.default", "aten._to_copy.default"}),
      op("add", "", {"aten.add.Tensor", "aten.add.Scalar"})};
  out.excluded = {{"normal", "", "random"}};
  return out;
}

std::vector<std::string> ids(const resolution& r) {
  std::vector<std::string> out;
  for (const auto& t : r.targets)
    out.push_back(t.op + "/" + t.variant + " " + t.wrapper);
  return out;
}

const std::string impl = "import torch\nimport triton\nimport triton.language as tl\n"
                         "import numpy\n\n"
                         "@triton.jit\ndef k(x_ptr):\n    pass\n\n"
                         "def abs__default_kernel_impl(input):\n    return input\n";

} // namespace

TEST(Importer, BackendBenchFoldersNameTheirOverloads) {
  EXPECT_EQ(overload_of("abs__default"), "aten.abs.default");
  EXPECT_EQ(overload_of("add__Tensor"), "aten.add.Tensor");
  EXPECT_EQ(overload_of("add___Tensor"), "aten.add_.Tensor");
  EXPECT_EQ(overload_of("_softmax__default"), "aten._softmax.default");
}

TEST(Importer, BackendBenchFileIsTestedThroughItsImplWithTheHarnessImportsBlanked) {
  auto kernel = parse_kernel(import_layout::backendbench,
                             {"abs__default/abs__default_implementation_v1.py", impl});
  EXPECT_EQ(kernel.problem, "");
  EXPECT_EQ(kernel.overload, "aten.abs.default");
  EXPECT_EQ(kernel.wrapper, "abs__default_kernel_impl");
  // Blanked, not removed: verdicts cite the file's line numbers. Other imports stay, for the
  // linter to judge.
  EXPECT_EQ(kernel.source.substr(0, 18), "\n\n\nimport numpy\n\n@");
  EXPECT_THAT(catalog_guesses(kernel), ElementsAre("abs", "nn.functional.abs"));
  EXPECT_THAT(ids(resolve(catalog(), kernel)), ElementsAre("abs/ abs__default_kernel_impl"));
}

TEST(Importer, AnOverloadMapsToTheOperatorThatIsItsAtenOpNotToThoseThatCallIt) {
  auto relu = parse_kernel(import_layout::backendbench,
                           {"relu__default/relu__default_implementation_v1.py",
                            "def relu__default_kernel_impl(x):\n    return x\n"});
  EXPECT_THAT(ids(resolve(catalog(), relu)),
              ElementsAre("nn.functional.relu/ relu__default_kernel_impl"));
  auto softmax = parse_kernel(import_layout::backendbench,
                              {"_softmax__default/_softmax__default_implementation_v2.py",
                               "def _softmax__default_kernel_impl(x, d, h):\n    return x\n"});
  EXPECT_THAT(ids(resolve(catalog(), softmax)),
              ElementsAre("softmax/ _softmax__default_kernel_impl"));
  auto sub = parse_kernel(import_layout::backendbench,
                          {"sub__Tensor/sub__Tensor_implementation_v1.py",
                           "def sub__Tensor_kernel_impl(a, b):\n    return a\n"});
  auto unmapped = resolve(catalog(), sub);
  EXPECT_TRUE(unmapped.targets.empty());
  EXPECT_EQ(to_string(unmapped.verdict), "unmapped");
  EXPECT_EQ(unmapped.detail,
            "folder sub__Tensor names the aten overload aten.sub.Tensor, one of the ATen ops of "
            "nn.functional.l1_loss, "
            "none of which is that op alone");
  auto mul = parse_kernel(import_layout::backendbench,
                          {"mul__Tensor/mul__Tensor_implementation_v1.py",
                           "def mul__Tensor_kernel_impl(a, b):\n    return a\n"});
  EXPECT_EQ(resolve(catalog(), mul).detail,
            "folder mul__Tensor names the aten overload aten.mul.Tensor, and no operator of the "
            "catalog dispatches to it");
}

TEST(Importer, BackendBenchFilesThatAreNoKernelsAreInvalid) {
  auto empty_folder = parse_kernel(import_layout::backendbench, {"abs__default/", ""});
  EXPECT_THAT(resolve(catalog(), empty_folder).detail, HasSubstr("not a BackendBench"));
  EXPECT_TRUE(catalog_guesses(empty_folder).empty());
  auto no_impl =
      parse_kernel(import_layout::backendbench, {"abs__default/abs__default_implementation_v1.py",
                                                 "def abs_kernel_impl(x):\n    return x\n"});
  auto r = resolve(catalog(), no_impl);
  EXPECT_EQ(to_string(r.verdict), "invalid");
  EXPECT_EQ(r.detail, "defines no abs__default_kernel_impl (BackendBench calls "
                      "<folder>_kernel_impl)");
}

TEST(Importer, CandidateFileNamesReadAsValidateReadsThem) {
  auto source = "@triton.jit\ndef k(x):\n    pass\n\ndef softmax(x, dim):\n    return x\n";
  auto plain = parse_kernel(import_layout::candidates, {"softmax.py", source});
  EXPECT_THAT(catalog_guesses(plain), ElementsAre("softmax"));
  EXPECT_THAT(ids(resolve(catalog(), plain)), ElementsAre("softmax/ softmax"));
  auto variant = parse_kernel(import_layout::candidates, {"softmax.with_dtype.py", source});
  EXPECT_THAT(catalog_guesses(variant), ElementsAre("softmax.with_dtype", "softmax"));
  EXPECT_THAT(ids(resolve(catalog(), variant)), ElementsAre("softmax/with_dtype softmax"));
  auto marked = parse_kernel(import_layout::candidates,
                             {"softmax.py", std::string{"# opforge: variants=default,with_dtype\n"
                                                        "# opforge: wrapper=my_softmax\n"} +
                                                source});
  EXPECT_THAT(ids(resolve(catalog(), marked)),
              ElementsAre("softmax/ my_softmax", "softmax/with_dtype my_softmax"));
  auto dotted =
      parse_kernel(import_layout::candidates,
                   {"nn.functional.relu.py", "def nn_functional_relu_wrapper(x):\n    return x\n"
                                             "def relu(x):\n    return x\n"});
  EXPECT_THAT(ids(resolve(catalog(), dotted)),
              ElementsAre("nn.functional.relu/ nn_functional_relu_wrapper"));
}

TEST(Importer, CandidateNamesOutsideTheCatalogAreUnmappedWithTheReason) {
  EXPECT_EQ(resolve(catalog(), parse_kernel(import_layout::candidates, {"normal.py", ""})).detail,
            "normal is excluded from the catalog: random");
  EXPECT_EQ(resolve(catalog(), parse_kernel(import_layout::candidates, {"nosuch.py", ""})).detail,
            "no operator of the catalog is named nosuch");
  EXPECT_EQ(
      resolve(catalog(), parse_kernel(import_layout::candidates, {"softmax.log.py", ""})).detail,
      "softmax has no variant 'log' in the catalog");
}

TEST(Importer, VerdictLinesNameWhereItFailed) {
  contract::test_result test;
  test.outcome = contract::outcome::accuracy_error;
  contract::test_failure failure;
  failure.dtype = "float32";
  failure.sample_set = "extremal";
  failure.sample_index = 2;
  failure.message = "1 of 12 elements differ\nmore";
  test.failure = failure;
  EXPECT_EQ(verdict_line(test), "float32 extremal #2: 1 of 12 elements differ");
  EXPECT_THAT(failure_feedback(test), HasSubstr("Its test ended accuracy_error"));

  contract::lint_result lint;
  lint.violations = {{"torch_call", 9, 5, "torch.sigmoid(out)", "compute it in a kernel"},
                     {"import", 1, 1, "import os", ""}};
  EXPECT_EQ(verdict_line(lint),
            "torch_call at line 9: torch.sigmoid(out); import at line 1: import os");
  EXPECT_THAT(failure_feedback(lint),
              HasSubstr("- line 9 (torch_call): torch.sigmoid(out). compute it in a kernel"));
  lint.syntax_error = contract::syntax_error{4, 56, "expected ':'"};
  EXPECT_EQ(verdict_line(lint), "syntax error at line 4: expected ':'");
}
