// A move-only std::function that keeps a callable of up to `Capacity` bytes in
// itself: for the completions of the request path, whose captures (a shared
// owner, a reference, a few numbers, the next completion) are larger than
// std::function's own buffer (libstdc++ keeps only trivially copyable
// callables of 16 bytes in place, and allocates for every other one). A
// larger callable, or one that may throw when moved, goes to the heap as with
// std::function. Called through a const object, as std::function is, on a
// callable that may change its own captures.
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace sluice {

template <class Signature, std::size_t Capacity>
class InlineFunction;

namespace inline_function_detail {
// What may be empty: converted from an empty one, an InlineFunction is empty.
template <class D>
struct Nullable : std::bool_constant<std::is_pointer_v<D> || std::is_member_pointer_v<D>> {};
template <class S>
struct Nullable<std::function<S>> : std::true_type {};
template <class S, std::size_t C>
struct Nullable<InlineFunction<S, C>> : std::true_type {};
}  // namespace inline_function_detail

template <class R, class... Args, std::size_t Capacity>
class InlineFunction<R(Args...), Capacity> {
 public:
  InlineFunction() noexcept = default;
  InlineFunction(std::nullptr_t) noexcept {}  // NOLINT: as std::function

  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, InlineFunction> &&
                                     std::is_invocable_r_v<R, D&, Args...>>>
  InlineFunction(F&& f) {  // NOLINT: converts as std::function does
    if constexpr (kNullable<D>) {
      if (!f) return;  // an empty function or a null pointer: empty, as std::function
    }
    if constexpr (kInPlace<D>) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
      ops_ = &kInPlaceOps<D>;
    } else {
      *reinterpret_cast<D**>(storage_) = new D(std::forward<F>(f));
      ops_ = &kHeapOps<D>;
    }
  }

  InlineFunction(InlineFunction&& other) noexcept { take(other); }
  InlineFunction& operator=(InlineFunction&& other) noexcept {
    // The new callable is taken first: `other` may live inside the old one.
    InlineFunction incoming(std::move(other));
    reset();
    take(incoming);
    return *this;
  }
  InlineFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  friend bool operator==(const InlineFunction& f, std::nullptr_t) noexcept { return !f; }

  R operator()(Args... args) const {
    if (ops_ == nullptr) throw std::bad_function_call();
    return ops_->invoke(const_cast<unsigned char*>(storage_), std::forward<Args>(args)...);
  }

  // Whether a callable of type F is kept in place.
  template <class F>
  static constexpr bool kInPlace = sizeof(F) <= Capacity && alignof(F) <= alignof(void*) &&
                                   std::is_nothrow_move_constructible_v<F>;

 private:
  template <class D>
  static constexpr bool kNullable = inline_function_detail::Nullable<D>::value;

  struct Ops {
    R (*invoke)(void* storage, Args&&... args);
    void (*move)(void* from, void* to) noexcept;  // leaves `from` destroyed
    void (*destroy)(void* storage) noexcept;
  };

  template <class D>
  static constexpr Ops kInPlaceOps = {
      [](void* s, Args&&... args) -> R {
        return std::invoke(*static_cast<D*>(s), std::forward<Args>(args)...);
      },
      [](void* from, void* to) noexcept {
        ::new (to) D(std::move(*static_cast<D*>(from)));
        static_cast<D*>(from)->~D();
      },
      [](void* s) noexcept { static_cast<D*>(s)->~D(); }};

  template <class D>
  static constexpr Ops kHeapOps = {
      [](void* s, Args&&... args) -> R {
        return std::invoke(**static_cast<D**>(s), std::forward<Args>(args)...);
      },
      [](void* from, void* to) noexcept { *static_cast<D**>(to) = *static_cast<D**>(from); },
      [](void* s) noexcept { delete *static_cast<D**>(s); }};

  void take(InlineFunction& other) noexcept {
    if (other.ops_ == nullptr) return;
    other.ops_->move(other.storage_, storage_);
    ops_ = std::exchange(other.ops_, nullptr);
  }
  void reset() noexcept {
    if (ops_ != nullptr) std::exchange(ops_, nullptr)->destroy(storage_);
  }

  alignas(void*) unsigned char storage_[Capacity < sizeof(void*) ? sizeof(void*) : Capacity];
  const Ops* ops_ = nullptr;
};

}  // namespace sluice
