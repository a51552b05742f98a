// The exported runtime's routing in the dispatcher: a boxed kernel per covered overload that
// decides, without entering Python, whether the library serves a call (its signature of dtypes
// and number types, and its shape class) and hands every other call to the overload's original
// kernel. A functional overload whose wrapper takes the schema's arguments as they are (none it
// has no place for) is served from here too: the same devices and layout rules as the runtime's
// Python ``Overload`` (``_runtime.py``: one device, ATen's result layout where it is contract),
// then the wrapper itself. Any other call it may serve goes to the ``Overload`` exactly as
// torch's own Python kernels are called (``torch.library.Library.impl(..., with_keyset=True)``),
// which makes every check. Copied verbatim into every exported package and built by
// ``_native.py`` the first time the package is enabled.
//
// Why: a kernel registered from Python costs a fall-through 2-4 us before it does anything, the
// runtime's routing in Python as much again, and a served call 5.6-8.3 us over its wrapper
// (bench/results/dispatch-native-routing-h200.md); a model calls many overloads the library
// covers with signatures or sizes it routes to ATen.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

namespace py = pybind11;

namespace {

// Signature tokens as the runtime's Python spells them (``_adapter._token``): a tensor's dtype
// as torch names it (``float32``), ``py:int`` for a Python number (a wrapped number when it was
// passed for a Tensor argument), ``none``, and ``[a|b]`` for the set a list holds.
const std::string& dtype_token(at::ScalarType type) {
  static const auto names = [] {
    std::array<std::string, static_cast<size_t>(at::ScalarType::NumOptions)> out;
    for (size_t index = 0; index < out.size(); ++index) {
      try {
        out[index] = torch::getTHPDtype(static_cast<at::ScalarType>(index))->name;
      } catch (const std::exception&) { // a type Python has no dtype for: no token
      }
    }
    return out;
  }();
  return names[static_cast<size_t>(type)];
}

const char* number_token(at::ScalarType type) {
  switch (type) {
  case at::ScalarType::Bool:
    return "py:bool";
  case at::ScalarType::Long:
    return "py:int";
  case at::ScalarType::Double:
    return "py:float";
  case at::ScalarType::ComplexDouble:
    return "py:complex";
  default:
    return nullptr;
  }
}

// Calls of any opforge package's kernels on this thread that are running now: a kernel's own
// calls (its allocations, copies, a torch call it makes), and those of the original kernel it
// fell through to, go straight to the original kernels.
thread_local int serving = 0;

struct Serving {
  Serving() { ++serving; }
  ~Serving() { --serving; }
  Serving(const Serving&) = delete;
  Serving& operator=(const Serving&) = delete;
};

// What the call's typed arguments say; `known` is false where a value is of a kind the runtime
// never tokenizes here (Python then decides, as it always did).
struct Signature {
  std::string text;
  int64_t largest = -1; // the elements of the largest tensor; -1 for none
  bool known = true;
  std::vector<const at::Tensor*> tensors; // the typed tensors, a list's included

  void tensor(const at::Tensor& value) {
    if (value.unsafeGetTensorImpl()->is_wrapped_number()) {
      const char* token = number_token(value.scalar_type());
      if (token == nullptr)
        known = false;
      else
        text += token;
      return;
    }
    const auto& token = dtype_token(value.scalar_type());
    known = known && !token.empty();
    text += token;
    largest = std::max(largest, value.numel());
    tensors.push_back(&value);
  }

  // A value that is not a list; false where it has no token.
  bool scalar(const c10::IValue& value, std::string& out) {
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      out = dtype_token(tensor.scalar_type());
      if (out.empty())
        return false;
      largest = std::max(largest, tensor.numel());
      tensors.push_back(&tensor);
    } else if (value.isNone())
      out = "none";
    else if (value.isBool())
      out = "py:bool";
    else if (value.isInt())
      out = "py:int";
    else if (value.isDouble())
      out = "py:float";
    else if (value.isComplexDouble())
      out = "py:complex";
    else if (value.isString())
      out = "py:str";
    else
      return false;
    return true;
  }

  void add(const c10::IValue& value) {
    if (value.isTensor())
      return tensor(value.toTensor());
    if (value.isList()) {
      std::set<std::string> items;
      std::string token;
      for (const c10::IValue& item : value.toListRef()) {
        if (!scalar(item, token)) {
          known = false;
          return;
        }
        items.insert(token);
      }
      text += '[';
      for (auto it = items.begin(); it != items.end(); ++it)
        text += (it == items.begin() ? "" : "|") + *it;
      text += ']';
      return;
    }
    std::string token;
    if (scalar(value, token))
      text += token;
    else
      known = false;
  }
};

// An argument as torch hands it to a Python kernel: dtypes, layouts and memory formats as their
// Python objects (the stack holds them as integers), wrapped numbers as Python numbers.
py::object to_python(const c10::Argument& argument, const c10::IValue& value) {
  if (value.isNone())
    return py::none();
  auto type = argument.real_type();
  if (const auto optional = type->cast<c10::OptionalType>())
    type = optional->getElementType();
  switch (type->kind()) {
  case c10::TypeKind::ScalarTypeType:
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(value.toScalarType())));
  case c10::TypeKind::LayoutType:
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(value.toLayout())));
  case c10::TypeKind::MemoryFormatType:
    return py::reinterpret_borrow<py::object>(
        torch::utils::getTHPMemoryFormat(value.toMemoryFormat()));
  default:
    return torch::jit::toPyObject(value);
  }
}

std::vector<c10::IValue> to_results(const c10::FunctionSchema& schema, const py::object& result) {
  const auto& returns = schema.returns();
  std::vector<c10::IValue> values;
  if (returns.empty()) {
    if (!result.is_none())
      throw std::runtime_error("opforge: a kernel of " + schema.name() + " returned a value");
    return values;
  }
  if (returns.size() == 1) {
    values.push_back(torch::jit::toIValue(result, returns[0].real_type()));
    return values;
  }
  const auto results = py::cast<py::sequence>(result);
  for (size_t index = 0; index < returns.size(); ++index)
    values.push_back(torch::jit::toIValue(results[index], returns[index].real_type()));
  return values;
}

// ATen's layout for an elementwise result, where it is known without running ATen (the rule of
// ``_runtime._aten_layout``): contiguous where every tensor is (no strides), or a single dense
// argument's strides (dense and non-overlapping in some order of its dims); false otherwise.
bool aten_layout(const std::vector<const at::Tensor*>& tensors, std::vector<int64_t>& strides) {
  strides.clear();
  if (std::all_of(tensors.begin(), tensors.end(),
                  [](const at::Tensor* tensor) { return tensor->is_contiguous(); }))
    return true;
  if (tensors.size() != 1)
    return false;
  const at::Tensor& tensor = *tensors[0];
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size) of the dims of size > 1
  for (int64_t dim = 0; dim < tensor.dim(); ++dim)
    if (tensor.size(dim) != 1)
      dims.emplace_back(tensor.stride(dim), tensor.size(dim));
  std::stable_sort(dims.begin(), dims.end(),
                   [](const auto& left, const auto& right) { return left.first < right.first; });
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected)
      return false;
    expected *= size;
  }
  const auto found = tensor.strides();
  strides.assign(found.begin(), found.end());
  return true;
}

// Whether a result tensor has the layout ``aten_layout`` gave (empty tensors have every layout;
// a dim of size 1 addresses nothing, whatever its stride).
bool has_layout(const at::Tensor& result, const std::vector<int64_t>& strides) {
  if (result.numel() == 0)
    return true;
  if (strides.empty())
    return result.is_contiguous();
  if (static_cast<size_t>(result.dim()) != strides.size())
    return false;
  for (int64_t dim = 0; dim < result.dim(); ++dim)
    if (result.size(dim) != 1 && result.stride(dim) != strides[dim])
      return false;
  return true;
}

bool results_have_layout(const std::vector<c10::IValue>& results,
                         const std::vector<int64_t>& strides) {
  for (const auto& result : results) {
    if (result.isTensor() && !has_layout(result.toTensor(), strides))
      return false;
    if (result.isTensorList())
      for (const at::Tensor& item : result.toTensorVector())
        if (!has_layout(item, strides))
          return false;
  }
  return true;
}

// The wrapper called from the dispatcher's stack: which schema arguments it takes by position,
// which by keyword (the runtime's ``_adapter.CallShape`` for the dispatcher's call convention).
struct DirectCall {
  py::object wrapper;
  std::vector<size_t> positional;
  std::vector<std::pair<py::str, size_t>> keywords;
};

class RoutedKernel final : public c10::OperatorKernel {
public:
  RoutedKernel(c10::SafeKernelFunction original, py::object overload, std::vector<size_t> typed,
               std::unordered_map<std::string, uint64_t> routes, std::vector<int64_t> bounds,
               std::optional<DirectCall> direct, bool keeps_layout,
               std::shared_ptr<std::atomic<uint64_t>> served)
      : original_(std::move(original)), overload_(std::move(overload)), typed_(std::move(typed)),
        routes_(std::move(routes)), bounds_(std::move(bounds)), direct_(std::move(direct)),
        keeps_layout_(keeps_layout), served_(std::move(served)) {}

  ~RoutedKernel() override {
    // Destroyed with its registration: by ``disable()`` (the GIL held), or by the interpreter's
    // exit, when the Python objects go with it.
    if (PyGILState_Check() != 0) {
      overload_ = py::object();
      direct_.reset();
    } else {
      overload_.release();
      if (direct_) {
        direct_->wrapper.release();
        for (auto& keyword : direct_->keywords)
          keyword.first.release();
      }
    }
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    if (serving > 0)
      return original_.callBoxed(op, keys, stack);
    const size_t count = op.schema().arguments().size();
    Signature signature = sign(stack->data() + (stack->size() - count));
    if (!may_serve(signature))
      return original_.callBoxed(op, keys, stack);
    if (direct_ && signature.known && serve_directly(op, keys, *stack, signature))
      return;
    serve_from_python(op, keys, *stack);
  }

private:
  Signature sign(const c10::IValue* arguments) const {
    Signature signature;
    for (size_t place = 0; place < typed_.size(); ++place) {
      if (place > 0)
        signature.text += ',';
      signature.add(arguments[typed_[place]]);
    }
    return signature;
  }

  // False where the runtime's routes send the call to the original kernel.
  bool may_serve(const Signature& signature) const {
    if (!signature.known)
      return true;
    const auto found = routes_.find(signature.text);
    if (found == routes_.end())
      return false;
    // the runtime's shape class: bisect_left over the bounds of the largest tensor (1 if none)
    const int64_t largest = signature.largest < 0 ? 1 : signature.largest;
    const auto shape_class =
        std::lower_bound(bounds_.begin(), bounds_.end(), largest) - bounds_.begin();
    return ((found->second >> shape_class) & 1U) != 0;
  }

  // The call answered by the wrapper, called from here, or by the original kernel; false where
  // the runtime's ``Overload`` must decide (it then finds the arguments on the stack as they were).
  bool serve_directly(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                      torch::jit::Stack& stack, const Signature& signature) {
    const auto& tensors = signature.tensors;
    if (tensors.size() > 1 &&
        std::any_of(tensors.begin() + 1, tensors.end(), [&](const at::Tensor* tensor) {
          return tensor->device() != tensors[0]->device();
        })) {
      original_.callBoxed(op, keys, &stack);
      return true;
    }
    std::vector<int64_t> strides;
    if (keeps_layout_ && !aten_layout(tensors, strides)) {
      original_.callBoxed(op, keys, &stack);
      return true;
    }
    const auto& schema = op.schema();
    const size_t count = schema.arguments().size();
    const c10::IValue* arguments = stack.data() + (stack.size() - count);
    std::vector<c10::IValue> results;
    {
      py::gil_scoped_acquire gil;
      py::tuple positional(direct_->positional.size());
      for (size_t place = 0; place < direct_->positional.size(); ++place) {
        const size_t index = direct_->positional[place];
        positional[place] = to_python(schema.arguments()[index], arguments[index]);
      }
      py::dict keywords;
      for (const auto& [name, index] : direct_->keywords)
        keywords[name] = to_python(schema.arguments()[index], arguments[index]);
      py::object result;
      {
        Serving running;
        result = py::reinterpret_steal<py::object>(
            PyObject_Call(direct_->wrapper.ptr(), positional.ptr(), keywords.ptr()));
      }
      if (!result) {
        if (PyErr_ExceptionMatches(PyExc_Exception) == 0)
          throw python_error(); // KeyboardInterrupt, SystemExit: not the kernel's failure
        // A call the judge's samples did not foresee: ATen's kernel answers it (the wrapper's
        // result is new memory, nothing of the caller's was written yet).
        py::error_already_set error;
        overload_.attr("_warn_once")(error.value());
        return fall_through(op, keys, stack);
      }
      if (result.is_none() && !schema.returns().empty())
        return fall_through(op, keys, stack);
      results = to_results(schema, result);
      if (keeps_layout_ && !results_have_layout(results, strides)) {
        overload_.attr("_refuse_layout")(result);
        return fall_through(op, keys, stack);
      }
    }
    torch::jit::drop(stack, count);
    for (auto& result : results)
      torch::jit::push(stack, std::move(result));
    served_->fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  bool fall_through(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack& stack) {
    py::gil_scoped_release released;
    original_.callBoxed(op, keys, &stack);
    return true;
  }

  void serve_from_python(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack& stack) {
    const auto& schema = op.schema();
    const auto arguments = torch::jit::pop(stack, schema.arguments().size());
    py::gil_scoped_acquire gil;
    // (keyset, the positional arguments) and the keyword-only ones, every one passed
    py::list positional;
    positional.append(py::cast(keys));
    py::dict keywords;
    for (size_t index = 0; index < arguments.size(); ++index) {
      const auto& argument = schema.arguments()[index];
      auto value = to_python(argument, arguments[index]);
      if (argument.kwarg_only())
        keywords[argument.name().c_str()] = std::move(value);
      else
        positional.append(std::move(value));
    }
    py::object result;
    {
      Serving running;
      result = py::reinterpret_steal<py::object>(
          PyObject_Call(overload_.ptr(), py::tuple(positional).ptr(), keywords.ptr()));
    }
    if (!result)
      throw python_error();
    for (auto& value : to_results(schema, result))
      torch::jit::push(stack, std::move(value));
  }

  c10::SafeKernelFunction original_;
  py::object overload_;
  std::vector<size_t> typed_;
  std::unordered_map<std::string, uint64_t> routes_;
  std::vector<int64_t> bounds_;
  std::optional<DirectCall> direct_;
  bool keeps_layout_;
  std::shared_ptr<std::atomic<uint64_t>> served_;
};

// One package's registrations under one dispatch key; gone with ``destroy`` (``disable()``).
class Registration {
public:
  explicit Registration(const std::string& key)
      : key_(c10::parseDispatchKey(key)),
        library_(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key_,
                                                  "opforge_dispatch", 0)) {}

  // Registers `overload` (the runtime's ``Overload``) for `name` (``abs.out``): the original
  // kernel is the one it has now. `wrapper`, where not None, is called from here with the
  // schema's arguments at `positional` and the named ones at `keywords`.
  void impl(const std::string& name, py::object overload, std::vector<size_t> typed,
            std::unordered_map<std::string, uint64_t> routes, std::vector<int64_t> bounds,
            py::object wrapper, std::vector<size_t> positional,
            std::vector<std::pair<std::string, size_t>> keywords, bool keeps_layout) {
    if (!library_)
      throw std::runtime_error("the registration was destroyed");
    const auto dot = name.find('.');
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(
        ("aten::" + name.substr(0, dot)).c_str(),
        dot == std::string::npos ? "" : name.substr(dot + 1).c_str());
    std::optional<DirectCall> direct;
    if (!wrapper.is_none()) {
      direct.emplace(DirectCall{std::move(wrapper), std::move(positional), {}});
      for (auto& [keyword, index] : keywords)
        direct->keywords.emplace_back(py::str(keyword), index);
    }
    auto& served = served_[name];
    served = std::make_shared<std::atomic<uint64_t>>(0);
    torch::PyWarningHandler warnings;
    library_->impl(
        name.c_str(),
        torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RoutedKernel>(
            op.getComputedKernelForDispatchKey(key_), std::move(overload), std::move(typed),
            std::move(routes), std::move(bounds), std::move(direct), keeps_layout, served)));
  }

  // Calls served from here (not through the ``Overload``) since registration or `reset_served`.
  std::unordered_map<std::string, uint64_t> served() const {
    std::unordered_map<std::string, uint64_t> counts;
    for (const auto& [name, count] : served_)
      counts[name] = count->load(std::memory_order_relaxed);
    return counts;
  }

  void reset_served() {
    for (auto& entry : served_)
      entry.second->store(0, std::memory_order_relaxed);
  }

  void destroy() { library_.reset(); }

private:
  c10::DispatchKey key_;
  std::unique_ptr<torch::Library> library_;
  std::unordered_map<std::string, std::shared_ptr<std::atomic<uint64_t>>> served_;
};

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  py::class_<Registration>(module, "Registration")
      .def(py::init<const std::string&>())
      .def("impl", &Registration::impl)
      .def("served", &Registration::served)
      .def("reset_served", &Registration::reset_served)
      .def("destroy", &Registration::destroy);
}
