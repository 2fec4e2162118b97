// ppl_loo Stan bridge: a C ABI over one stanc-generated model, batched over draws.
//
// This file is compiled in ONE translation unit together with the stanc output: the Python side
// passes `-include <model>.hpp` (see ppl_loo/stan/compile.py), so `stan_model` (the concrete
// model class that stanc aliases at the end of its output) is visible here and the templated
// `log_prob<propto, jacobian>` / `stan::model::log_prob_grad` can be used directly.
//
// Conventions of the C ABI (all functions are `extern "C"`):
//   * arrays are C-contiguous float64, `theta` has shape (S, d) row-major;
//   * functions that can fail return 0 on success and non-zero on failure; on failure `*err`
//     receives a malloc'ed, NUL-terminated message that the caller frees with `plstan_free_string`;
//   * no C++ exception ever crosses the ABI;
//   * the density functions take `reject`: when non-zero, a draw at which Stan throws
//     std::domain_error (what Stan's samplers treat as a rejection: a scale that underflowed to 0,
//     an argument that overflowed to inf, ...) gets log density -inf (gradient NaN) and is counted
//     in `*n_rejected`, instead of failing the whole batch. Every other exception (index out of
//     range, wrong sizes, ...) is an error in either mode.

#include <stan/io/json/json_data.hpp>
#include <stan/model/log_prob_grad.hpp>
#include <stan/model/log_prob_propto.hpp>
#include <stan/services/util/create_rng.hpp>
#include <stan/version.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <stdexcept>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

char* dup_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, s.c_str(), s.size() + 1);
  }
  return out;
}

void set_error(char** err, const std::string& msg) {
  if (err != nullptr) {
    *err = dup_string(msg);
  }
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

}  // namespace

struct plstan_model {
  stan_model* model;
  std::size_t d;
  std::string names[2][2];  // [include_tp][include_gq] constrained names, comma separated
  std::size_t n_out[2][2];
  std::string unc_names;
  std::string dims_json[2][2];
  std::string param_names;
};

namespace {

// Runs body(s, msgs) for s in [0, S) on up to `n_threads` threads. Each worker owns a Stan
// autodiff stack (required under STAN_THREADS). The first failure (lowest draw index among the
// ones that failed) is reported with its draw index.
// Threads are only worth their start-up cost (tens of microseconds) with enough draws each.
constexpr int kMinDrawsPerThread = 16;

template <typename F>
int run_draws(int S, int n_threads, char** err, F&& body) {
  if (S <= 0) return 0;
  int nt = std::max(1, std::min(n_threads, (S + kMinDrawsPerThread - 1) / kMinDrawsPerThread));
  std::mutex mtx;
  int first_bad = -1;
  std::string first_msg;
  auto record = [&](int s, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mtx);
    if (first_bad < 0 || s < first_bad) {
      first_bad = s;
      first_msg = msg;
    }
  };
  auto worker = [&](int lo, int hi) {
    // Under STAN_THREADS the AD stack is thread-local; this initializes it on threads that have
    // none yet (a no-op on threads that already have one, e.g. the process' main thread).
    stan::math::ChainableStack thread_stack;
    // one message stream per worker: constructing a std::stringstream costs about as much as a
    // small model's whole gradient, so it is reset (only when something was printed) rather than
    // rebuilt for every draw
    std::stringstream msgs;
    for (int s = lo; s < hi; ++s) {
      if (msgs.tellp() > 0) {
        msgs.str(std::string());
        msgs.clear();
      }
      try {
        body(s, &msgs);
      } catch (const std::exception& e) {
        std::string m = e.what();
        std::string printed = msgs.str();
        if (!printed.empty()) m += "\n[model output] " + printed;
        record(s, m);
        stan::math::recover_memory();
        return;
      } catch (...) {
        record(s, "unknown C++ exception");
        stan::math::recover_memory();
        return;
      }
    }
  };
  if (nt == 1) {
    worker(0, S);
  } else {
    std::vector<std::thread> threads;
    int chunk = (S + nt - 1) / nt;
    for (int t = 1; t < nt; ++t) {
      int lo = t * chunk, hi = std::min(S, (t + 1) * chunk);
      if (lo < hi) threads.emplace_back(worker, lo, hi);
    }
    worker(0, std::min(S, chunk));
    for (auto& th : threads) th.join();
  }
  if (first_bad >= 0) {
    set_error(err, "draw " + std::to_string(first_bad) + ": " + first_msg);
    return 1;
  }
  return 0;
}

std::string dims_to_json(const std::vector<std::string>& names,
                         const std::vector<std::vector<size_t>>& dims) {
  std::string out = "{";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += "\"" + names[i] + "\": [";
    for (std::size_t k = 0; k < dims[i].size(); ++k) {
      if (k) out += ", ";
      out += std::to_string(dims[i][k]);
    }
    out += "]";
  }
  return out + "}";
}

}  // namespace

extern "C" {

const char* plstan_stan_version() {
  return STAN_STRING(STAN_MAJOR) "." STAN_STRING(STAN_MINOR) "." STAN_STRING(STAN_PATCH);
}

void plstan_free_string(char* s) { std::free(s); }

// Instantiates the model from a JSON data string. Returns NULL and sets *err on failure.
plstan_model* plstan_new(const char* json_data, unsigned int seed, char** err) {
  // transformed data may use nested autodiff (ODE and algebraic solvers): this thread needs its own
  // autodiff stack when it is not the one that loaded the library (see plstan_sample_nuts)
  stan::math::ChainableStack thread_stack;
  std::stringstream msgs;
  try {
    std::string js = (json_data == nullptr || json_data[0] == '\0') ? "{}" : json_data;
    std::istringstream in(js);
    stan::json::json_data context(in);
    auto* out = new plstan_model();
    try {
      out->model = new stan_model(context, seed, &msgs);
    } catch (...) {
      delete out;
      throw;
    }
    stan_model& m = *out->model;
    out->d = m.num_params_r();
    for (int tp = 0; tp < 2; ++tp) {
      for (int gq = 0; gq < 2; ++gq) {
        std::vector<std::string> names;
        m.constrained_param_names(names, tp, gq);
        out->names[tp][gq] = join(names, ',');
        out->n_out[tp][gq] = names.size();
        std::vector<std::string> pnames;
        std::vector<std::vector<size_t>> dims;
        m.get_param_names(pnames, tp, gq);
        m.get_dims(dims, tp, gq);
        out->dims_json[tp][gq] = dims_to_json(pnames, dims);
      }
    }
    std::vector<std::string> unames;
    m.unconstrained_param_names(unames, false, false);
    out->unc_names = join(unames, ',');
    return out;
  } catch (const std::exception& e) {
    std::string m = e.what();
    if (!msgs.str().empty()) m += "\n[model output] " + msgs.str();
    set_error(err, m);
  } catch (...) {
    set_error(err, "unknown C++ exception while instantiating the model");
  }
  return nullptr;
}

void plstan_destroy(plstan_model* pm) {
  if (pm != nullptr) {
    delete pm->model;
    delete pm;
  }
}

const char* plstan_model_name(plstan_model* pm) {
  static thread_local std::string name;
  name = pm->model->model_name();
  return name.c_str();
}

int plstan_num_unconstrained(plstan_model* pm) { return static_cast<int>(pm->d); }

int plstan_num_constrained(plstan_model* pm, int include_tp, int include_gq) {
  return static_cast<int>(pm->n_out[include_tp != 0][include_gq != 0]);
}

// Comma-separated names; the strings are owned by the model object.
const char* plstan_constrained_names(plstan_model* pm, int include_tp, int include_gq) {
  return pm->names[include_tp != 0][include_gq != 0].c_str();
}

const char* plstan_unconstrained_names(plstan_model* pm) { return pm->unc_names.c_str(); }

// JSON object {"name": [dims...], ...} in declaration order.
const char* plstan_dims_json(plstan_model* pm, int include_tp, int include_gq) {
  return pm->dims_json[include_tp != 0][include_gq != 0].c_str();
}

// out[s] = log p(theta[s, :]) for s < S.
int plstan_log_density(plstan_model* pm, int propto, int jacobian, const double* theta, int S,
                       double* out, int n_threads, int reject, int* n_rejected, char** err) {
  const std::size_t d = pm->d;
  stan_model& m = *pm->model;
  std::atomic<int> rejected{0};
  int rc = run_draws(S, n_threads, err, [&](int s, std::ostream* msgs) {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta + s * d, d);
    double lp;
    try {
    if (propto) {
      // dropping constants needs autodiff types (with doubles every term is "constant")
      if (jacobian) {
        lp = stan::model::log_prob_propto<true>(m, x, msgs);
      } else {
        lp = stan::model::log_prob_propto<false>(m, x, msgs);
      }
    } else {
      lp = jacobian ? m.template log_prob<false, true>(x, msgs)
                    : m.template log_prob<false, false>(x, msgs);
    }
    } catch (const std::domain_error&) {
      if (!reject) throw;
      lp = -std::numeric_limits<double>::infinity();
      ++rejected;
    }
    out[s] = lp;
  });
  if (n_rejected != nullptr) *n_rejected = rejected.load();
  return rc;
}

// lp[s] = log p(theta[s]), grad[s, :] = d log p / d theta at theta[s].
int plstan_log_density_gradient(plstan_model* pm, int propto, int jacobian, const double* theta,
                                int S, double* lp, double* grad, int n_threads, int reject,
                                int* n_rejected, char** err) {
  const std::size_t d = pm->d;
  stan_model& m = *pm->model;
  std::atomic<int> rejected{0};
  int rc = run_draws(S, n_threads, err, [&](int s, std::ostream* msgs) {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta + s * d, d);
    Eigen::VectorXd g(d);
    double v;
    try {
      if (propto) {
        v = jacobian ? stan::model::log_prob_grad<true, true>(m, x, g, msgs)
                     : stan::model::log_prob_grad<true, false>(m, x, g, msgs);
      } else {
        v = jacobian ? stan::model::log_prob_grad<false, true>(m, x, g, msgs)
                     : stan::model::log_prob_grad<false, false>(m, x, g, msgs);
      }
    } catch (const std::domain_error&) {
      if (!reject) throw;
      // log_prob_grad recovers the autodiff memory before rethrowing
      v = -std::numeric_limits<double>::infinity();
      g.setConstant(std::numeric_limits<double>::quiet_NaN());
      ++rejected;
    }
    lp[s] = v;
    Eigen::Map<Eigen::VectorXd>(grad + s * d, d) = g;
  });
  if (n_rejected != nullptr) *n_rejected = rejected.load();
  return rc;
}

// Stan's own gradient cost, for benchmarks: n_reps calls of stan::model::log_prob_grad<true, true>
// (what NUTS evaluates) at the same point, timed in C++ with no Python in between. Returns the
// mean seconds per gradient in *seconds and the last value in *lp.
int plstan_time_gradient(plstan_model* pm, const double* theta, int n_reps, double* seconds,
                         double* lp, char** err) {
  const std::size_t d = pm->d;
  stan_model& m = *pm->model;
  return run_draws(1, 1, err, [&](int, std::ostream* msgs) {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, d);
    Eigen::VectorXd g(d);
    double v = stan::model::log_prob_grad<true, true>(m, x, g, msgs);  // warm-up
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < n_reps; ++r) {
      v = stan::model::log_prob_grad<true, true>(m, x, g, msgs);
    }
    auto t1 = std::chrono::steady_clock::now();
    *seconds = std::chrono::duration<double>(t1 - t0).count() / std::max(n_reps, 1);
    *lp = v;
  });
}

// out[s, :] = write_array(theta[s]). With include_gq the RNG of draw s is
// create_rng(seed, s0 + s + 1) (s0: the index of theta[0] among all the caller's draws, so that calls on chunks
// of draws give what one call would), so the result does not depend on the number of threads; without
// generated quantities no RNG is used and seeding one per draw (about 10 us) is skipped.
int plstan_param_constrain(plstan_model* pm, int include_tp, int include_gq, const double* theta,
                           int S, unsigned int seed, int s0, double* out, int n_threads, char** err) {
  const std::size_t d = pm->d;
  const std::size_t n_out = pm->n_out[include_tp != 0][include_gq != 0];
  stan_model& m = *pm->model;
  // `auto`: stan::rng_t (boost mixmax) since Stan 2.35, boost::ecuyer1988 before
  using rng_type = decltype(stan::services::util::create_rng(0, 0));
  return run_draws(S, n_threads, err, [&](int s, std::ostream* msgs) {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta + s * d, d);
    Eigen::VectorXd vars(n_out);
    static thread_local rng_type unused_rng = stan::services::util::create_rng(0, 1);
    if (include_gq) {
      rng_type rng = stan::services::util::create_rng(seed, static_cast<unsigned int>(s0 + s) + 1);
      m.write_array(rng, x, vars, include_tp != 0, true, msgs);
    } else {
      m.write_array(unused_rng, x, vars, include_tp != 0, false, msgs);
    }
    if (static_cast<std::size_t>(vars.size()) != n_out) {
      throw std::runtime_error("write_array returned an unexpected number of values");
    }
    Eigen::Map<Eigen::VectorXd>(out + s * n_out, n_out) = vars;
  });
}

// out[s, :] = unconstrain(theta[s]) where theta has shape (S, n_params) in the order of
// constrained_param_names(include_tp=false, include_gq=false).
int plstan_param_unconstrain(plstan_model* pm, const double* theta, int S, double* out,
                             int n_threads, char** err) {
  const std::size_t d = pm->d;
  const std::size_t n_in = pm->n_out[0][0];
  stan_model& m = *pm->model;
  return run_draws(S, n_threads, err, [&](int s, std::ostream* msgs) {
    Eigen::VectorXd c = Eigen::Map<const Eigen::VectorXd>(theta + s * n_in, n_in);
    Eigen::VectorXd u(d);
    m.unconstrain_array(c, u, msgs);
    Eigen::Map<Eigen::VectorXd>(out + s * d, d) = u;
  });
}

// Unconstrains one point given as a JSON object of constrained parameter values (transform_inits).
int plstan_param_unconstrain_json(plstan_model* pm, const char* json, double* out, char** err) {
  const std::size_t d = pm->d;
  stan_model& m = *pm->model;
  return run_draws(1, 1, err, [&](int, std::ostream* msgs) {
    std::istringstream in(json);
    stan::json::json_data context(in);
    Eigen::VectorXd u(d);
    m.transform_inits(context, u, msgs);
    Eigen::Map<Eigen::VectorXd>(out, d) = u;
  });
}

}  // extern "C"

#ifdef PLSTAN_WITH_SAMPLER
// ---------------------------------------------------------------------------------------------
// Optional (built with -DPLSTAN_WITH_SAMPLER, see ppl_loo/stan/sampler.py): Stan's own NUTS with
// diagonal-metric adaptation (stan::services::sample::hmc_nuts_diag_e_adapt, CmdStan's default
// `method=sample`), writing its output through the same writer CmdStan uses
// (stan::callbacks::unique_stream_writer with the "# " comment prefix) after a CmdStan-style
// configuration header given by the caller. Off by default: the services headers add about 40%
// to the compile time.
#include <stan/callbacks/interrupt.hpp>
#include <stan/callbacks/stream_logger.hpp>
#include <stan/callbacks/unique_stream_writer.hpp>
#include <stan/callbacks/writer.hpp>
#include <stan/io/empty_var_context.hpp>
#include <stan/services/sample/hmc_nuts_diag_e_adapt.hpp>

#include <csignal>
#include <fstream>

namespace {
// Ctrl-C during a chain: Python runs its SIGINT handler only when the native call returns, so while a chain
// runs, a handler of our own records the signal and Stan's interrupt callback (called every iteration) stops
// the chain; plstan_sample_nuts then returns PLSTAN_INTERRUPTED and the caller raises KeyboardInterrupt.
volatile std::sig_atomic_t sigint_seen = 0;
extern "C" void on_sigint(int) { sigint_seen = 1; }
constexpr int PLSTAN_INTERRUPTED = -2;

struct sigint_interrupt : public stan::callbacks::interrupt {
  void operator()() override {
    if (sigint_seen) throw std::runtime_error("interrupted (SIGINT)");
  }
};
}  // namespace

extern "C" {

int plstan_has_sampler() { return 1; }

// Runs one chain and writes `header` then Stan's CSV output to `path`. The logger's messages
// (including "Gradient evaluation took ...") are returned in *log (free with plstan_free_string).
// Returns Stan's services return code (0 = OK); -1 when the file cannot be opened or C++ threw.
int plstan_sample_nuts(plstan_model* pm, const char* path, const char* header, int num_warmup,
                       int num_samples, int thin, int save_warmup, unsigned int seed,
                       unsigned int chain, double init_radius, double stepsize, double delta,
                       int max_depth, char** log, char** err) {
  // Stan's autodiff stack is thread-local (STAN_THREADS): a chain run on a thread other than the one
  // that loaded the library (a dask worker's task thread, a Python thread) needs its own, or it
  // dereferences a null stack. A no-op on a thread that already has one.
  stan::math::ChainableStack thread_stack;
  std::stringstream log_stream;
  int rc = -1;
  sigint_seen = 0;
  struct sigaction act {}, old {};
  act.sa_handler = on_sigint;
  sigemptyset(&act.sa_mask);
  const bool handler_set = sigaction(SIGINT, &act, &old) == 0;
  try {
    auto out = std::make_unique<std::ofstream>(path);
    if (!out->good()) {
      set_error(err, std::string("cannot open ") + path + " for writing");
      return -1;
    }
    *out << header;
    stan::callbacks::unique_stream_writer<std::ofstream> sample_writer(std::move(out), "# ");
    stan::callbacks::writer init_writer;
    stan::callbacks::writer diagnostic_writer;
    sigint_interrupt interrupt;
    stan::callbacks::stream_logger logger(log_stream, log_stream, log_stream, log_stream,
                                          log_stream);
    stan::io::empty_var_context init;
    rc = stan::services::sample::hmc_nuts_diag_e_adapt(
        *pm->model, init, seed, chain, init_radius, num_warmup, num_samples, thin,
        save_warmup != 0, 0, stepsize, 0.0, max_depth, delta, 0.05, 0.75, 10.0, 75, 50, 25,
        interrupt, logger, init_writer, sample_writer, diagnostic_writer);
  } catch (const std::exception& e) {
    set_error(err, e.what());
    rc = -1;
  }
  if (handler_set) sigaction(SIGINT, &old, nullptr);
  if (sigint_seen) rc = PLSTAN_INTERRUPTED;
  if (log != nullptr) *log = dup_string(log_stream.str());
  return rc;
}

}  // extern "C"
#endif  // PLSTAN_WITH_SAMPLER
