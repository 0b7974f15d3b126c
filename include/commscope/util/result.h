// Result<T> and Error: how errors at the boundary (bad config, bad flag, impossible plan)
// travel as values. Not for programmer errors: those abort through CS_CHECK with file:line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace commscope {

// One error message, shaped "<where>: <field>: expected X, got Y". The CLI prints it as
// one line on stderr and exits with status 2.
struct Error {
  std::string message;
};

// Either a value or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const Error& error() const { return std::get<Error>(v_); }
  const T& operator*() const { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

inline Status ok_status() {
  return {};
}

[[noreturn]] inline void check_failed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "commscope: internal error: %s at %s:%d\n", cond, file, line);
  std::abort();
}

}  // namespace commscope

#define CS_CONCAT_INNER(a, b) a##b
#define CS_CONCAT(a, b) CS_CONCAT_INNER(a, b)

// Programmer errors: abort with file:line.
#define CS_CHECK(cond) ((cond) ? (void)0 : ::commscope::check_failed(#cond, __FILE__, __LINE__))

// Early return of an error from a function returning Result<U> or Status.
#define CS_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    auto cs_status_ = (expr);                        \
    if (!cs_status_.ok()) return cs_status_.error(); \
  } while (0)

// NOLINTBEGIN(bugprone-macro-parentheses): lhs is a declaration, it cannot be parenthesized.
#define CS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.error();             \
  lhs = std::move(tmp).value()

// CS_ASSIGN_OR_RETURN(auto x, f()); declares x from a Result or returns its error.
#define CS_ASSIGN_OR_RETURN(lhs, expr) \
  CS_ASSIGN_OR_RETURN_IMPL(CS_CONCAT(cs_result_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)
