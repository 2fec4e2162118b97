"""The layout the design asks for (DESIGN.md), checked on the source: imports point down
(numerics < bridge, readers < model adapters < workflow < user surface), no import cycles, no private
name imported from another module, no ppl_loo import hidden inside a function, no function over 60
lines of code, numerics free of xarray, and ``import ppl_loo`` loads neither PyMC nor PyTensor."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ppl_loo"
MAX_LINES = 60


def _modules():
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text()))
    return out


MODULES = _modules()


def _layer(name):
    part = name.split(".")[1] if "." in name else ""
    if name in ("ppl_loo.jax_settings", "ppl_loo.program_cache") or part == "numerics":
        return 0
    if part in ("stan_bridge", "io", "datasets"):
        return 1
    if part in ("model", "adapters"):
        return 2
    if part == "models":
        return 3
    if part in ("workflow", "sampling"):
        return 4
    return 5  # ppl_loo/__init__.py, cli.py


def _target(module, node):
    """The ppl_loo modules an import statement of ``module`` names, with the imported names."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name.startswith("ppl_loo")]
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if MODULES[module][0].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
    if not base.startswith("ppl_loo"):
        return []
    return [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, a.name) for a in node.names]


def _imports(module, tree):
    """``(target, name, top_level)`` of every ppl_loo import (``if TYPE_CHECKING:`` blocks left out)."""
    skip = {id(n) for s in ast.walk(tree) if isinstance(s, ast.If) and getattr(s.test, "id", "") == "TYPE_CHECKING"
            for n in ast.walk(s)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
            out += [(t, n, node.col_offset == 0) for t, n in _target(module, node)]
    return out


def test_imports_point_down_and_form_no_cycle():
    edges = {m: {t for t, _, top in _imports(m, tree) if top and t in MODULES} for m, (_, tree) in MODULES.items()}
    upward = sorted((m, t) for m, ts in edges.items() for t in ts if _layer(t) > _layer(m))
    assert upward == []
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for t in edges[m]:
            assert state.get(t) != "open", f"import cycle: {' -> '.join(stack + [m, t])}"
            if t not in state:
                visit(t, stack + [m])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [])


def test_no_private_names_across_modules_and_no_hidden_imports():
    private = [(m, t, n) for m, (_, tree) in MODULES.items() for t, n, _ in _imports(m, tree)
               if n and n.startswith("_") and t != m]
    hidden = [(m, t) for m, (_, tree) in MODULES.items() for t, _, top in _imports(m, tree) if not top]
    assert private == [] and hidden == []


def _code_lines(fn):
    body = fn.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        if len(body) == 1:
            return 0
        first = body[1]
    return fn.end_lineno - first.lineno + 1


def test_no_function_over_60_lines():
    long = [(str(path.relative_to(PKG)), fn.name, _code_lines(fn)) for path, tree in MODULES.values()
            for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _code_lines(fn) > MAX_LINES]
    assert long == []


@pytest.mark.parametrize("library", ["xarray", "pymc", "pytensor", "arviz_base", "arviz_stats"])
def test_numerics_use_arrays_only(library):
    users = [m for m, (_, tree) in MODULES.items() if m.startswith("ppl_loo.numerics")
             for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
             for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
             if name.split(".")[0] == library and not name.startswith("arviz_stats.base")]
    assert users == []  # arviz_stats.base is arviz_stats' array layer


def test_import_loads_no_pymc():
    code = "import sys, ppl_loo; print(sorted(m for m in ('pymc', 'pytensor') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_as_model_names_the_bad_input():
    """``as_model`` (the one entry to the protocol) says what it got and what to pass instead."""
    import ppl_loo as pl

    with pytest.raises(TypeError, match=r"model of type dict is not a ppl_loo model\. Pass a pymc\.Model"):
        pl.as_model({"mu": 0.0})
    with pytest.raises(TypeError, match=r"model of type str is not supported by pl\.pvi"):
        pl.as_model("model.stan", pvi=True)
    with pytest.raises(ValueError, match=r"simulator= is a PVI input; pl\.loo does not use it"):
        pl.as_model(pl.models.LogisticRegression([[0.0], [1.0]], [0, 1]), simulator=lambda v, k: v)


def test_workflow_reaches_models_through_the_protocol_only():
    """The workflow reads no ``.source`` (nor ``getattr(x, "source")``) of a model and imports no adapter module
    (``ppl_loo.adapters.pymc``, ``.stan``, ``.jax``): what it needs from an adapter is a field of ``Model``, which has
    no ``source`` and no mutable ``cache``."""
    from ppl_loo.model import Model

    reads, adapters = [], []
    for m, (path, tree) in MODULES.items():
        if not m.startswith("ppl_loo.workflow"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "source":
                reads.append((m, node.lineno))
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr", "setattr")
                    and len(node.args) > 1 and getattr(node.args[1], "value", None) == "source"):
                reads.append((m, node.lineno))
        adapters += [(m, t) for t, _, _ in _imports(m, tree)
                     if t.startswith(("ppl_loo.adapters.pymc", "ppl_loo.adapters.stan", "ppl_loo.adapters.jax"))]
    assert reads == [] and adapters == []
    assert "source" not in Model._fields and "cache" not in Model._fields


def test_module_map_of_contributing_is_current():
    """``docs/contributing.md``'s module map is what ``docs/module_map.py`` writes from the modules' docstrings: a
    module added, renamed or re-described without regenerating it fails here."""
    proc = subprocess.run([sys.executable, str(PKG.parent / "docs" / "module_map.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (PKG.parent / "docs" / "contributing.md").read_text()
    for path in PKG.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            assert f"`{path.name}`" in text, path
