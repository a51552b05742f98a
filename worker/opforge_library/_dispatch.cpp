// The exported runtime's routing in the dispatcher: a boxed kernel per covered overload that
// decides, without entering Python, whether the library serves a call (its signature of dtypes
// and number types, and its shape class) and hands every other call to the overload's original
// kernel. A call it may serve goes to the runtime's Python ``Overload`` exactly as torch's own
// Python kernels are called (``torch.library.Library.impl(..., with_keyset=True)``), which still
// makes every other check. Copied verbatim into every exported package and built by
// ``_native.py`` the first time the package is enabled.
//
// Why: a kernel registered from Python costs a fall-through 2-4 us before it does anything, and
// the runtime's routing in Python as much again (bench/results/dispatch-direct-launch-h200.md);
// a model calls many overloads the library covers with signatures or sizes it routes to ATen.

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
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

// What the call's typed arguments say; `known` is false where a value is of a kind the runtime
// never tokenizes here (Python then decides, as it always did).
struct Signature {
  std::string text;
  int64_t largest = -1; // the elements of the largest tensor; -1 for none
  bool known = true;

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
  }

  // A value that is not a list; false where it has no token.
  bool scalar(const c10::IValue& value, std::string& out) {
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      out = dtype_token(tensor.scalar_type());
      if (out.empty())
        return false;
      largest = std::max(largest, tensor.numel());
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

void push_results(const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                  const py::object& result) {
  const auto& returns = schema.returns();
  if (returns.empty()) {
    if (!result.is_none())
      throw std::runtime_error("opforge: a kernel of " + schema.name() + " returned a value");
    return;
  }
  if (returns.size() == 1)
    return torch::jit::push(stack, torch::jit::toIValue(result, returns[0].real_type()));
  const auto results = py::cast<py::sequence>(result);
  for (size_t index = 0; index < returns.size(); ++index)
    torch::jit::push(stack, torch::jit::toIValue(results[index], returns[index].real_type()));
}

class RoutedKernel final : public c10::OperatorKernel {
public:
  RoutedKernel(c10::SafeKernelFunction original, py::object serve, std::vector<size_t> typed,
               std::unordered_map<std::string, uint64_t> routes, std::vector<int64_t> bounds)
      : original_(std::move(original)), serve_(std::move(serve)), typed_(std::move(typed)),
        routes_(std::move(routes)), bounds_(std::move(bounds)) {}

  ~RoutedKernel() override {
    // Destroyed with its registration: by ``disable()`` (the GIL held), or by the interpreter's
    // exit, when the callable goes with it.
    if (PyGILState_Check() != 0)
      serve_ = py::object();
    else
      serve_.release();
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    if (!may_serve(op, *stack))
      return original_.callBoxed(op, keys, stack);
    const auto& schema = op.schema();
    const auto arguments = torch::jit::pop(*stack, schema.arguments().size());
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
    auto result = py::reinterpret_steal<py::object>(
        PyObject_Call(serve_.ptr(), py::tuple(positional).ptr(), keywords.ptr()));
    if (!result)
      throw python_error();
    push_results(schema, *stack, result);
  }

private:
  // False where the runtime's routes send the call to the original kernel.
  bool may_serve(const c10::OperatorHandle& op, const torch::jit::Stack& stack) const {
    const size_t count = op.schema().arguments().size();
    const c10::IValue* arguments = stack.data() + (stack.size() - count);
    Signature signature;
    for (size_t place = 0; place < typed_.size(); ++place) {
      if (place > 0)
        signature.text += ',';
      signature.add(arguments[typed_[place]]);
    }
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

  c10::SafeKernelFunction original_;
  py::object serve_;
  std::vector<size_t> typed_;
  std::unordered_map<std::string, uint64_t> routes_;
  std::vector<int64_t> bounds_;
};

// One package's registrations under one dispatch key; gone with ``destroy`` (``disable()``).
class Registration {
public:
  explicit Registration(const std::string& key)
      : key_(c10::parseDispatchKey(key)),
        library_(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key_,
                                                  "opforge_dispatch", 0)) {}

  // Registers `serve` for `name` (``abs.out``): the original kernel is the one it has now.
  void impl(const std::string& name, py::object serve, std::vector<size_t> typed,
            std::unordered_map<std::string, uint64_t> routes, std::vector<int64_t> bounds) {
    if (!library_)
      throw std::runtime_error("the registration was destroyed");
    const auto dot = name.find('.');
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(
        ("aten::" + name.substr(0, dot)).c_str(),
        dot == std::string::npos ? "" : name.substr(dot + 1).c_str());
    torch::PyWarningHandler warnings;
    library_->impl(name.c_str(),
                   torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RoutedKernel>(
                       op.getComputedKernelForDispatchKey(key_), std::move(serve), std::move(typed),
                       std::move(routes), std::move(bounds))));
  }

  void destroy() { library_.reset(); }

private:
  c10::DispatchKey key_;
  std::unique_ptr<torch::Library> library_;
};

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  py::class_<Registration>(module, "Registration")
      .def(py::init<const std::string&>())
      .def("impl", &Registration::impl)
      .def("destroy", &Registration::destroy);
}
