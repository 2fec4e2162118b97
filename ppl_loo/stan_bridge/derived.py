"""The derived Stan programs: one entry of the ``log_lik`` generated quantity, and the program Stan's NUTS
samples for LOO (the mixture of all LOO posteriors, or one LOO posterior).

This module owns both programs that ppl_loo derives from a user's Stan program by moving the
``generated quantities`` statements into the ``model`` block, so that Stan's autodiff
differentiates ``log_lik`` and Stan's own NUTS can sample from a density built on it:

- :func:`loglik_program`: log density ``log_lik[i]`` (exact LOO for programs with parameters
  indexed by observation, below);
- :func:`sampling_program`: log density ``log p(theta | y) + log sum_j exp(-log_lik[j])``, the
  mixture-importance-sampling target of Silva & Zanella (2023), ``q_mix(theta) ∝ p(theta | y)
  sum_j 1 / p(y_j | theta)``, on which one MCMC run gives every LOO ``elpd_i`` with finite
  variance (data ``ppl_loo_obs_index = 0``); or ``log p(theta | y) - log_lik[i]`` (``= i``), the
  posterior without observation ``i``, which Stan's NUTS samples as that observation's exact refit.

Exact LOO by data deletion needs the program on the data without observation ``i`` to have the
same parameters. Programs with a parameter per observation (eight schools' ``theta_tilde``, an
observation-level random effect) lose a coordinate instead. For those, the LOO density in the full
parameter space is ``log p(theta | D) - log p(y_i | theta)``, and ``log p(y_i | theta)`` is the
``log_lik[i]`` generated quantity the user already wrote. Generated quantities are evaluated in
double precision, without derivatives; :func:`loglik_program` rewrites the program so that Stan's
autodiff differentiates them:

- the ``model`` block is replaced by the statements of the ``generated quantities`` block followed by
  ``target += log_lik[ppl_loo_obs_index];`` (a new ``int`` data entry);
- statements that call a ``*_rng`` function (not allowed in the model block; posterior predictive
  draws such as ``y_hat``) are removed;
- the constraints of the generated quantities' top-level declarations are dropped (locals of the
  model block cannot be constrained);
- the ``generated quantities`` block itself is removed.

The data, transformed data, parameters and transformed parameters blocks are unchanged, so the
derived program has the same unconstrained parameters, in the same order; its log density with
``jacobian=False`` is ``log_lik[i]`` and its gradient is Stan's reverse-mode autodiff.

:func:`sampling_program` keeps every block, the ``generated quantities`` included (so a fit of it
still writes ``log_lik``), adds the data entry, and replaces the ``model`` block by two nested blocks, so that the
local names of the two cannot clash: ``{ <the model block's statements> }`` and ``{ <the generated quantities'
statements, rewritten as above> <the mixture's or the LOO posterior's term> }``. Its log density
(``propto=False``, ``jacobian=True``) is the original program's plus ``logsumexp(-log_lik)``, or minus
``log_lik[i]``.

The rewrite works on stanc's canonical print of the program (``stanc --print-canonical``), with
a scanner that skips comments and strings. A program it cannot rewrite (``log_lik`` computed from a
random number, a constrained type such as ``simplex`` declared in the generated quantities) fails
to compile, and the caller says so; :class:`~ppl_loo.adapters.stan.posterior.StanPosterior` also
checks the derived value against the generated quantity at test points before using it.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from ppl_loo.stan_bridge.compile import StanCompileError, stanc_path

__all__ = ["OBS_INDEX", "BELOW", "loglik_program", "sampling_program", "cdf_program", "canonical"]

#: the data entry of the derived program that selects the observation (1-based)
OBS_INDEX = "ppl_loo_obs_index"

_BLOCKS = ("functions", "data", "transformed data", "parameters", "transformed parameters", "model",
           "generated quantities")
#: constrained vector/matrix types -> the unconstrained local type (its size expression kept)
_VECTOR_TYPES = {"simplex": "vector", "unit_vector": "vector", "ordered": "vector", "positive_ordered": "vector",
                 "sum_to_zero_vector": "vector"}


def canonical(code: str) -> str:
    """The program as ``stanc --print-canonical`` prints it (blocks at column 0, one statement per line)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "program.stan"
        path.write_text(code)
        proc = subprocess.run([str(stanc_path()), "--print-canonical", str(path)], capture_output=True, text=True,
                              timeout=120, check=False)
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()) or f"stanc exited with {proc.returncode}"
        raise StanCompileError(f"stanc could not read the Stan program:\n{msg}")
    return proc.stdout


def _code_mask(text: str) -> list[bool]:
    """``mask[k]``: character ``k`` is code (not inside a comment or a string literal)."""
    mask = [True] * len(text)
    k, n = 0, len(text)
    while k < n:
        if text.startswith("//", k) or text[k] == "#":
            end = text.find("\n", k)
            end = n if end < 0 else end
        elif text.startswith("/*", k):
            end = text.find("*/", k + 2)
            end = n if end < 0 else end + 2
        elif text[k] == '"':
            end = text.find('"', k + 1)
            end = n if end < 0 else end + 1
        else:
            k += 1
            continue
        for j in range(k, end):
            mask[j] = False
        k = end
    return mask


def _blocks(text: str) -> dict[str, tuple[int, int, int]]:
    """``{block name: (start of its header, start of its body, index of its closing brace)}``."""
    mask = _code_mask(text)
    out = {}
    pattern = re.compile(r"^(" + "|".join(b.replace(" ", r"\s+") for b in _BLOCKS) + r")\s*\{", re.MULTILINE)
    for m in pattern.finditer(text):
        if not mask[m.start()]:
            continue
        depth, k = 0, m.end() - 1
        while k < len(text):
            if mask[k] and text[k] == "{":
                depth += 1
            elif mask[k] and text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        name = " ".join(m.group(1).split())
        if name in out or depth != 0:
            raise ValueError(f"cannot parse the {name!r} block of the program")
        out[name] = (m.start(), m.end(), k)
    return out


def _replace_blocks(text: str, blocks: dict, new: dict[str, str]) -> str:
    """``text`` with each block named in ``new`` (from its header to its closing brace, as :func:`_blocks`
    finds it) replaced by ``new[name]`` (``""`` removes it); the text around and between them kept as it is."""
    pieces, pos = [], 0
    for name in sorted(new, key=lambda b: blocks[b][0]):
        start, _, end = blocks[name]
        pieces += [text[pos:start], new[name]]
        pos = end + 1
    return "".join(pieces) + text[pos:]


def _strip_comments(text: str) -> str:
    mask = _code_mask(text)
    return "".join(c if keep or c == "\n" else " " for c, keep in zip(text, mask))


def _drop_rng_statements(body: str) -> str:
    """Remove every brace-free statement that calls a ``*_rng`` function."""
    part = r"(?:[^;{}]|\{[^;{}]*\})"  # statement text; braces only around an array expression
    pattern = re.compile(rf"(?<=[;{{}}]){part}*?\b\w+_rng\s*\({part}*;")
    return pattern.sub(_keep_declaration, "{" + body)[1:]  # a statement at the start follows a brace


_DECLARATION = re.compile(r"^\s*(?:array\s*\[.*\]\s*)?\w+\s*(?:<.*>)?\s*(?:\[.*\])?\s+\w+\s*$", re.DOTALL)


def _keep_declaration(match: re.Match) -> str:
    """A declaration keeps its variable (without the random initial value); other statements go."""
    left = match.group(0).split("=", 1)[0]
    return left.rstrip() + ";" if "=" in match.group(0) and _DECLARATION.match(left) else ""


def _matching_angle(text: str, k: int) -> int:
    """Index of the ``>`` closing the ``<`` at ``k`` (angle brackets and parentheses nested)."""
    depth = 0
    for j in range(k, len(text)):
        c = text[j]
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced '<' in a declaration of the generated quantities")


def _unconstrain_declarations(body: str) -> str:
    """Drop ``<lower=..., upper=...>`` and constrained types from the top-level declarations."""
    out, depth = [], 0
    for line in body.splitlines(keepends=True):
        if depth == 0:
            line = _unconstrain_line(line)
        depth += line.count("{") - line.count("}")
        out.append(line)
    return "".join(out)


def _unconstrain_line(line: str) -> str:
    m = re.match(r"(\s*(?:array\s*\[[^\]]*\]\s*)?)(\w+)", line)
    if m is None:
        return line
    kind = m.group(2)
    rest = line[m.end():]
    if kind in _VECTOR_TYPES:
        kind = _VECTOR_TYPES[kind]
    elif kind not in ("int", "real", "complex", "vector", "row_vector", "matrix", "complex_vector",
                      "complex_row_vector", "complex_matrix"):
        return line
    if rest.lstrip().startswith("<"):
        k = len(rest) - len(rest.lstrip())
        rest = rest[_matching_angle(rest, k) + 1:]
    return m.group(1) + kind + rest


def loglik_program(code: str, log_lik: str = "log_lik") -> str:
    """The derived program whose log density (``jacobian=False``) is ``log_lik[ppl_loo_obs_index]``.

    Parameters
    ----------
    code
        The Stan program (text).
    log_lik
        Name of the generated quantity holding the pointwise log-likelihood (a vector or 1-D array).

    Raises
    ------
    ValueError
        The program has no ``generated quantities`` block, does not declare ``log_lik`` in it, or
        already uses the name ``ppl_loo_obs_index``.
    StanCompileError
        stanc cannot read the program.
    """
    text = _strip_comments(canonical(code))
    blocks = _blocks(text)
    if re.search(rf"\b{OBS_INDEX}\b", text):
        raise ValueError(f"the program already uses the name {OBS_INDEX!r}")
    body = _log_lik_statements(text, blocks, log_lik)
    model_body = f"{body.rstrip()}\n  target += {log_lik}[{OBS_INDEX}];\n"
    new = {"generated quantities": "", "model": "model {" + model_body + "}"}
    if "data" in blocks:
        new["data"] = _data_with_index(text, blocks, lower=1)
    derived = _replace_blocks(text, blocks, {name: piece for name, piece in new.items() if name in blocks})
    if "data" not in blocks:
        derived = _insert_data_block(derived, blocks)
    if "model" not in blocks:
        derived = derived.rstrip() + "\nmodel {" + model_body + "}\n"
    return derived


def _data_with_index(text: str, blocks: dict, lower: int) -> str:
    """The program's data block with ``int<lower=lower> ppl_loo_obs_index;`` appended."""
    start, _, end = blocks["data"]
    return text[start:end].rstrip() + f"\n  int<lower={lower}> {OBS_INDEX};\n}}"


def _insert_data_block(derived: str, blocks: dict, lower: int = 1) -> str:
    """Add ``data { int<lower=lower> ppl_loo_obs_index; }`` after the functions block (or first)."""
    decl = f"data {{\n  int<lower={lower}> {OBS_INDEX};\n}}\n"
    if "functions" not in blocks:
        return decl + derived
    inner = _blocks(derived)["functions"]
    return derived[:inner[2] + 1] + "\n" + decl + derived[inner[2] + 1:]


def _log_lik_statements(text: str, blocks: dict, log_lik: str) -> str:
    """The generated quantities' statements as model-block statements: top-level declarations
    unconstrained, ``*_rng`` statements removed; raises when there is no ``log_lik`` to compute."""
    if "generated quantities" not in blocks:
        raise ValueError(f"the program has no generated quantities block, so no {log_lik!r} to differentiate: "
                         f"add one declaring the pointwise log-likelihood ({log_lik} with log p(y_i | theta) "
                         "per observation), or pass log_likelihood= with the name of yours")
    _, gq_body_start, gq_end = blocks["generated quantities"]
    gq_body = text[gq_body_start:gq_end]
    if not re.search(rf"^\s*(?:array\s*\[[^\]]*\]\s*)?\w+(?:<[^;]*>)?(?:\[[^\]]*\])?\s+{re.escape(log_lik)}\s*[;=]",
                     gq_body, re.MULTILINE):
        raise ValueError(f"{log_lik!r} is not declared at the top of the generated quantities block: declare the "
                         "pointwise log-likelihood there, or pass log_likelihood= with the name of yours")
    return _drop_rng_statements(_unconstrain_declarations(gq_body))


def sampling_program(code: str, log_lik: str = "log_lik") -> str:
    """The derived program that Stan's own NUTS samples for LOO: the mixture of all LOO posteriors (Silva & Zanella
    2023, mixture IS) or the posterior without one observation, chosen by the data entry ``ppl_loo_obs_index``.

    Its log density (``propto=False``, ``jacobian=True``) is the original program's plus ``log sum_j
    exp(-log_lik[j])`` where ``ppl_loo_obs_index`` is 0, so Stan's NUTS on it samples ``q_mix(theta) ∝ p(theta |
    y) sum_j 1 / p(y_j | theta)``; and the original program's minus ``log_lik[i]`` where it is ``i >= 1``: the
    posterior without observation ``i`` in the full parameter space, whose NUTS run is the exact refit of a program
    with a parameter per observation (data deletion would drop that parameter). One compilation serves both. The
    ``model`` block becomes two nested blocks, ``{ <the original model statements> }`` then ``{ <the generated
    quantities' statements, *_rng statements removed, top-level declarations unconstrained> <the term> }``; the
    data block gets ``int<lower=0> ppl_loo_obs_index;``; every other block, the generated quantities included, is
    kept as it was (same unconstrained parameters in the same order; a fit still writes ``log_lik``).

    Parameters
    ----------
    code
        The Stan program (text).
    log_lik
        Name of the generated quantity holding the pointwise log-likelihood (a vector or 1-D array).

    Returns
    -------
    str
        The derived program (stanc's canonical print, comments removed).

    Raises
    ------
    ValueError
        The program has no ``generated quantities`` block, does not declare ``log_lik`` at its top level, or
        already uses the name ``ppl_loo_obs_index``.
    StanCompileError
        stanc cannot read the program.
    """
    text = _strip_comments(canonical(code))
    blocks = _blocks(text)
    if re.search(rf"\b{OBS_INDEX}\b", text):
        raise ValueError(f"the program already uses the name {OBS_INDEX!r}")
    body = _log_lik_statements(text, blocks, log_lik)
    term = (f"    if ({OBS_INDEX} == 0) {{\n      target += log_sum_exp(-to_vector({log_lik}));\n    }} else {{\n"
            f"      target += -{log_lik}[{OBS_INDEX}];\n    }}\n")
    gq_part = f"  {{\n{body.strip(chr(10)).rstrip()}\n{term}  }}\n"
    new = {}
    if "data" in blocks:
        new["data"] = _data_with_index(text, blocks, lower=0)
    if "model" in blocks:
        _, body_start, end = blocks["model"]
        model_part = f"  {{\n{text[body_start:end].strip(chr(10)).rstrip()}\n  }}\n"
        new["model"] = "model {\n" + model_part + gq_part + "}"
    derived = _replace_blocks(text, blocks, new)
    if "model" not in blocks:  # the model block goes before the generated quantities block
        start = _blocks(derived)["generated quantities"][0]
        derived = derived[:start] + "model {\n" + gq_part + "}\n" + derived[start:]
    return derived if "data" in blocks else _insert_data_block(derived, blocks, lower=0)


#: distributions Stan writes on a link scale and has no CDF for: the CDF of the natural-scale distribution, with the
#: link's inverse applied to the parameter at that position (0-based, after the ``|``)
_LINK_SCALE = {"poisson_log": ("poisson", 0, "exp"), "bernoulli_logit": ("bernoulli", 0, "inv_logit"),
               "binomial_logit": ("binomial", 1, "inv_logit"), "neg_binomial_2_log": ("neg_binomial_2", 0, "exp")}
_LOG_LIK_CALL = r"(\b{name}\s*\[[^\]=;]*\]\s*=\s*)([A-Za-z]\w*?)_(lpdf|lpmf)\s*\("
#: the generated quantity of :func:`cdf_program` with ``log P(y_rep < y)`` of a discrete outcome
BELOW = "ppl_loo_lcdf_below"


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at the ``sep`` characters outside brackets."""
    parts, depth, last = [], 0, 0
    for k, c in enumerate(text):
        depth += c in "([{"
        depth -= c in ")]}"
        if c == sep and depth == 0:
            parts.append(text[last:k])
            last = k + 1
    return parts + [text[last:]]


def _close(text: str, k: int) -> int:
    """The index of the parenthesis closing the one opened just before ``text[k]``."""
    depth = 1
    for j in range(k, len(text)):
        depth += (text[j] == "(") - (text[j] == ")")
        if depth == 0:
            return j
    raise ValueError("unbalanced parentheses")


def cdf_program(code: str, log_lik: str = "log_lik") -> tuple[str, bool]:
    """The program whose ``log_lik`` generated quantity is the observation model's log CDF at each observation.

    Every assignment ``log_lik[...] = D_lpdf(y | args);`` (or ``_lpmf``) of the generated quantities becomes
    ``log_lik[...] = D_lcdf(y | args);``, Stan's own CDF of the same distribution at the same parameters. For a
    discrete outcome (``_lpmf``) a second generated quantity, :data:`BELOW` (declared as ``log_lik`` is), gets
    ``D_lcdf(y - 1 | args)``, ``log P(y_rep < y)``, in the same program. Distributions on a link scale use their
    natural-scale CDF (:data:`_LINK_SCALE`: ``poisson_log(eta)`` as ``poisson(exp(eta))``). Every other block is
    kept, so the program has the same parameters and data. Returns the program and whether the outcome is discrete.

    Raises
    ------
    ValueError
        An assignment to ``log_lik`` is not one ``_lpdf``/``_lpmf`` call (a sum, a truncation, a mixture), there
        is none, discrete and continuous ones are mixed, or (discrete) ``log_lik`` is declared with a value: the
        caller asks for ``cdf=``.
    """
    text = _strip_comments(canonical(code))
    blocks = _blocks(text)
    _log_lik_statements(text, blocks, log_lik)  # checks that the block declares it
    if re.search(rf"\b{BELOW}\b", text):
        raise ValueError(f"the program already uses the name {BELOW!r}")
    _, body_start, end = blocks["generated quantities"]
    body = text[body_start:end]
    pieces, pos, kinds = [], 0, set()
    for m in re.finditer(rf"\b{re.escape(log_lik)}\b[^;=]*=[^;]*;", body):
        lhs, dist, kind, outcome, params = _density_call(m.group(0), log_lik)
        call = f"{dist}_lcdf({outcome} |{','.join(params)});"
        below = f" {re.sub(rf'^{re.escape(log_lik)}', BELOW, lhs)}{dist}_lcdf(({outcome}) - 1 |{','.join(params)});"
        kinds.add(kind)
        # braces: the two statements stay one where the original was a loop's body without them
        pieces += [body[pos:m.start()], f"{{ {lhs}{call}{below} }}" if kind == "lpmf" else lhs + call]
        pos = m.end()
    if not kinds:
        raise ValueError(f"the generated quantities never assign {log_lik!r}: no CDF can be derived")
    if len(kinds) > 1:
        raise ValueError(f"{log_lik!r} is assigned from both _lpdf and _lpmf calls: no one CDF can be derived")
    new_body = "".join(pieces) + body[pos:]
    if kinds == {"lpmf"}:
        decl = re.search(rf"^([ \t]*)((?:array\s*\[[^\]]*\]\s*)?\w+(?:<[^;]*>)?(?:\[[^\]]*\])?)\s+"
                         rf"{re.escape(log_lik)}\s*;", new_body, re.MULTILINE)
        if decl is None:
            raise ValueError(f"{log_lik!r} is declared with a value: no CDF below the observed counts can be derived")
        new_body = new_body[:decl.end()] + f"\n{decl.group(1)}{decl.group(2)} {BELOW};" + new_body[decl.end():]
    new_gq = text[blocks["generated quantities"][0]:body_start] + new_body + "}"
    return _replace_blocks(text, blocks, {"generated quantities": new_gq}), kinds == {"lpmf"}


def _density_call(statement: str, log_lik: str):
    """``(lhs, distribution, "lpdf" or "lpmf", outcome, [parameters])`` of ``log_lik[...] = D_lpdf(y | ...);``, the
    distribution on its natural scale (:data:`_LINK_SCALE`), or a ValueError: no CDF can be derived from it."""
    call = re.match(_LOG_LIK_CALL.format(name=re.escape(log_lik)), statement)
    close = _close(statement, call.end()) if call else -1
    if call is None or statement[close + 1:].strip() != ";":
        raise ValueError(f"the statement {statement.strip()!r} does not assign one _lpdf or _lpmf call to "
                         f"{log_lik!r}: no CDF can be derived from it")
    dist, kind = call.group(2), call.group(3)
    args = _split_top(statement[call.end():close], "|")
    if len(args) != 2:
        raise ValueError(f"the statement {statement.strip()!r}: no '|' in the call to {dist}_{kind}")
    params = _split_top(args[1], ",")
    if dist in _LINK_SCALE:
        dist, at, link = _LINK_SCALE[dist]
        params[at] = f" {link}({params[at].strip()})"
    return call.group(1), dist, kind, args[0].strip(), params
