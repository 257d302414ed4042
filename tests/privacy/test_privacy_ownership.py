"""``dpfair_jax.privacy`` owns randomness, scales, sensitivities, clips, relations and zCDP.

An algorithm hands ``privacy`` a value, its sensitivity, the relation and a multiplier or rho, and
gets the noised value back, so that one place states each noise scale and its guarantee. This scan
reads the source (AST) of ``dpfair_jax/algorithms``, ``analysis``, ``studies`` and ``fairness``
(``privacy/``, ``data/``, ``models/`` and ``audit/`` are not scanned) for the hand-written forms:

* ``draw``: any ``jax.random.<fn>`` (under any import alias) other than key handling
  (:data:`KEY_HANDLING`): samplers live in ``privacy.sampling``, noise in ``privacy.mechanisms``
  (the exponential mechanism there too);
* ``sqrt_scale``: ``sqrt(2 * ...rho...)``, ``x / sqrt(2 * ...)`` and ``sqrt(x / (2 * ...))``, the
  Gaussian zCDP scale ``sens / sqrt(2 rho)`` (``privacy.accounting.gaussian_sigma_for_rho``);
* ``clip_std``: ``multiplier * clip`` / ``noise... * clip...`` stds;
* ``hand_clip``: ``min(1, C / norm)``, ``max(1, norm / C)``, ``C / max(norm, C)`` and
  ``min(norm, C)`` (``privacy.bounding`` / ``privacy.clipping``);
* ``relation_branch``: ``relation == "..."``, ``relation in ("add_remove", ...)``, a ``match`` on a
  relation or a dict keyed by relation labels (``privacy.relations``);
* ``zcdp_function``: a function named ``*rho*`` / ``*zcdp*`` (own zCDP conversions or ledgers;
  ``privacy.accounting``).

Each exemption is listed in :data:`EXEMPT` with its reason. ``test_each_rule_catches_its_form``
plants every form in a temporary tree, so a scan that finds nothing cannot pass vacuously.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("dpfair_jax/algorithms", "dpfair_jax/analysis", "dpfair_jax/studies", "dpfair_jax/fairness")
KEY_HANDLING = frozenset({"key", "PRNGKey", "split", "fold_in", "key_data", "wrap_key_data", "clone"})
RELATION_LABELS = frozenset({"add_remove", "replace_one", "replace_one_within_group"})
_NOISE_WORDS = ("noise", "multiplier", "sigma")

# (path, enclosing function ("a.b" when nested; "<module>" at top level), rule) -> reason
EXEMPT: dict[tuple[str, str, str], str] = {
    ("dpfair_jax/algorithms/fermi/algorithm.py", "init_w", "draw"):
        "DP-FERMI's w_init='randn' start (the authors' code): a data-independent initial ascent "
        "variable, not noise added to a release",
    ("dpfair_jax/analysis/hessian.py", "_rademacher_like", "draw"):
        "Hutchinson's probe vectors for a Hessian trace estimate: data-independent, nothing released",
    ("dpfair_jax/studies/stratification.py", "mixture_trial", "draw"):
        "simulates the Fig. 3 study's population (the reference generator's group sizes, means, "
        "values and private/public split); the estimators draw their noise through privacy",
    ("dpfair_jax/analysis/decomposition.py", "_step_mc.one", "draw"):
        "Monte Carlo of paper 001's Theorem 2 decomposition: simulates one step's batch to measure "
        "the expected change of the group losses; nothing is released (the step's noise is drawn "
        "through privacy.mechanisms)",
    ("dpfair_jax/studies/allocation.py", "two_group_trial", "draw"):
        "one standard-normal draw per trial for its data and its noise (common random numbers across "
        "budgets and methods); budget_tailoring.fit_many_from_draws scales the noise part by the "
        "stds privacy.zcdp_noise computes",
    ("dpfair_jax/algorithms/synthesis/marginals.py", "_sample_core", "draw"):
        "samples synthetic rows from the released marginal model: post-processing of a DP release",
    ("dpfair_jax/algorithms/reductions/oracles.py", "dp_weighted_least_squares.project", "hand_clip"):
        "projection onto the public decision set {||theta|| <= R} of the constrained problem (an "
        "optimizer step, not a sensitivity clip; the DP-GD gradients are clipped through privacy)",
    ("dpfair_jax/algorithms/mean_estimation/coinpress.py", "coinpress_rhos", "zcdp_function"):
        "splits the public budget rho by the public fractions of the config (no sensitivity, no "
        "conversion); the ledger composes the parts",
    ("dpfair_jax/algorithms/mean_estimation/groups.py", "resolve_count_rho", "zcdp_function"):
        "chooses the count budget from the relation (privacy.relations) and public fractions; "
        "no conversion",
    ("dpfair_jax/algorithms/synthesis/__init__.py", "_rho_split", "zcdp_function"):
        "splits the public budget rho by the config's public count fraction; no conversion",
    ("dpfair_jax/algorithms/synthesis/__init__.py", "_host_rho", "zcdp_function"):
        "reads and checks hparams.rho on the host; no conversion",
}


@dataclasses.dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    rule: str
    function: str
    code: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} [{self.rule}] {self.function}: {self.code}"


def _tokens(node: ast.AST) -> set[str]:
    """Lower-case ``_``-separated words of every name and attribute in ``node``."""
    words = set()
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if name:
            words.update(w for w in name.lower().split("_") if w)
    return words


def _mentions(node: ast.AST, *stems: str) -> bool:
    return any(w.startswith(s) for w in _tokens(node) for s in stems)


def _is_two(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 2


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 1


def _factors(node: ast.AST) -> list[ast.AST]:
    """The operands of a chain of ``*``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return []


class _Scan(ast.NodeVisitor):
    def __init__(self, rel: str, source: str):
        self.rel, self.source, self.found = rel, source, []
        self.stack: list[str] = []
        self.aliases: dict[str, str] = {}  # local name -> the dotted jax name it is bound to

    # -- bookkeeping -------------------------------------------------------------------------
    def _add(self, rule: str, node: ast.AST) -> None:
        code = (ast.get_source_segment(self.source, node) or "").split("\n")[0][:100]
        self.found.append(Finding(self.rel, node.lineno, rule, ".".join(self.stack) or "<module>", code))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name == "jax" or a.name.startswith("jax."):
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and (node.module == "jax" or node.module.startswith("jax.")):
            for a in node.names:
                self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def _resolve(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def _function(self, node) -> None:
        self.stack.append(node.name)
        words = [w for w in node.name.lower().split("_") if w]
        if any(w.startswith("rho") or "zcdp" in w for w in words):
            self._add("zcdp_function", node)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    # -- rules ---------------------------------------------------------------------------------
    def _draw(self, node: ast.AST) -> None:
        name = self._resolve(node)
        if name and name.startswith("jax.random."):
            fn = name[len("jax.random."):]
            if "." not in fn and fn[:1].islower() and fn not in KEY_HANDLING:
                self._add("draw", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._draw(node)
        if not (self._resolve(node) or "").startswith("jax.random."):
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._draw(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node)
        if name == "sqrt" and len(node.args) == 1:
            arg = node.args[0]
            two = _factors(arg)
            if len(two) > 1 and any(map(_is_two, two)) and _mentions(arg, "rho"):
                self._add("sqrt_scale", node)
            elif (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div)
                  and len(_factors(arg.right)) > 1 and any(map(_is_two, _factors(arg.right)))):
                self._add("sqrt_scale", node)
        if name in ("min", "minimum", "max", "maximum") and len(node.args) == 2:
            a, b = node.args
            one_and_ratio = any(_is_one(x) and isinstance(y, ast.BinOp) and isinstance(y.op, ast.Div)
                                and _mentions(y, "norm", "clip") for x, y in ((a, b), (b, a)))
            norm_and_clip = name in ("min", "minimum") and any(
                _mentions(x, "norm") and not _mentions(x, "clip") and _mentions(y, "clip")
                for x, y in ((a, b), (b, a)))
            if one_and_ratio or norm_and_clip:
                self._add("hand_clip", node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):
            r = node.right
            if (_call_name(r) == "sqrt" and len(r.args) == 1 and len(_factors(r.args[0])) > 1
                    and any(map(_is_two, _factors(r.args[0])))
                    and not _mentions(r.args[0], "rho")):  # a rho one is reported by visit_Call
                self._add("sqrt_scale", node)
            if (_call_name(r) in ("max", "maximum") and len(r.args) == 2
                    and _mentions(r, "norm") and _mentions(r, "clip")):
                self._add("hand_clip", node)
        if isinstance(node.op, ast.Mult) and not (
                isinstance(getattr(node, "parent", None), ast.BinOp) and isinstance(node.parent.op, ast.Mult)):
            fs = _factors(node)
            clip = [i for i, f in enumerate(fs) if _mentions(f, "clip")]
            noise = [i for i, f in enumerate(fs) if _mentions(f, *_NOISE_WORDS)
                     or (isinstance(f, ast.Name) and f.id == "z")]
            if any(i != j for i in clip for j in noise):
                self._add("clip_std", node)
        for child in ast.iter_child_nodes(node):
            child.parent = node
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops) and any(
                _mentions(s, "relation") for s in sides) and any(_strings(s) for s in sides):
            self._add("relation_branch", node)
        self.generic_visit(node)

    def visit_Match(self, node) -> None:
        if _mentions(node.subject, "relation"):
            self._add("relation_branch", node)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if keys & RELATION_LABELS:
            self._add("relation_branch", node)
        self.generic_visit(node)


def scan(root: Path = ROOT, exempt: dict = EXEMPT) -> list[Finding]:
    """Every finding under :data:`SCANNED` of ``root`` that :data:`EXEMPT` does not list."""
    found = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            source = path.read_text()
            s = _Scan(rel, source)
            s.visit(ast.parse(source))
            found += [f for f in s.found if (f.path, f.function, f.rule) not in exempt]
    return sorted(set(found))


_FOUND = scan()


def test_privacy_arithmetic_lives_in_privacy():
    """No draw, scale, clip, relation branch or zCDP conversion outside ``dpfair_jax.privacy``
    except the reasoned exemptions."""
    assert _FOUND == [], "\n".join(map(str, _FOUND))


def test_every_exemption_is_used_and_reasoned():
    """An exemption whose code is gone (or renamed) is removed rather than left to cover new code."""
    everything = scan(exempt={})
    keys = {(f.path, f.function, f.rule) for f in everything}
    assert all(reason.strip() for reason in EXEMPT.values())
    assert [k for k in EXEMPT if k not in keys] == []


_PLANTED = {
    "draw": (
        "import jax\nimport jax.random as jr\nfrom jax import random\nfrom jax.random import laplace as lap\n"
        "import jax as j\n"
        "def f(k):\n"
        "    a = jax.random.normal(k, (2,))\n"  # 7
        "    b = jr.bernoulli(k, 0.5)\n"  # 8
        "    c = random.categorical(k, b)\n"  # 9
        "    d = lap(k)\n"  # 10
        "    e = j.random.permutation(k, 3)\n"  # 11
        "    g = jax.vmap(jax.random.uniform)(k)\n"  # 12
        "    k1, k2 = jax.random.split(jax.random.fold_in(jax.random.key(0), 1))\n"
        "    return jr.wrap_key_data(jr.key_data(k1)), random.PRNGKey(0), random.clone(k2)\n",
        [7, 8, 9, 10, 11, 12]),
    "sqrt_scale": (
        "import math\nimport jax.numpy as jnp\n"
        "def f(sens, rho, tau, T, mu, x):\n"
        "    a = sens / jnp.sqrt(2.0 * rho)\n"  # 4
        "    b = jnp.sqrt(2 * count_rho)\n"  # 5
        "    c = sens / math.sqrt(2.0 * tau)\n"  # 6
        "    d = sens * jnp.sqrt(T / (2.0 * mu))\n"  # 7
        "    e = 0.5 * (1 + math.erf(x / math.sqrt(2))) + math.sqrt(2.0 / x) + math.sqrt(2 * x)\n"
        "    return a, b, c, d, e\n",
        [4, 5, 6, 7]),
    "clip_std": (
        "def f(noise_multiplier, clip_norm, z, clip, factor, hp, m):\n"
        "    a = noise_multiplier * clip_norm\n"  # 2
        "    b = z * jnp.asarray(clip) * factor\n"  # 3
        "    c = hp.noise_w * 2.0 * hp.clip_w\n"  # 4
        "    d = m * clip_norm + factor * noise_multiplier\n"
        "    return a, b, c, d\n",
        [2, 3, 4]),
    "hand_clip": (
        "import jax.numpy as jnp\n"
        "def f(g, C, norm, norms, clip_norm):\n"
        "    a = g * jnp.minimum(1.0, C / norm)\n"  # 3
        "    b = g / jnp.maximum(1, norm / C)\n"  # 4
        "    c = g * clip_norm / jnp.maximum(norms, clip_norm)\n"  # 5
        "    d = jnp.minimum(norms, clip_norm) / clip_norm\n"  # 6
        "    e = min(norm / C, 1)\n"  # 7
        "    return a, b, c, d, e, jnp.minimum(clip_norm, 3.0), jnp.maximum(norms, 1e-12), max(1.0, (C + g) / 2)\n",
        [3, 4, 5, 6, 7]),
    "relation_branch": (
        "def f(config, relation):\n"
        "    if config.relation == 'add_remove':\n"  # 2
        "        return 1\n"
        "    if relation in ('replace_one', 'replace_one_within_group'):\n"  # 4
        "        return 2\n"
        "    match relation:\n"  # 6
        "        case _:\n"
        "            pass\n"
        "    return {'add_remove': 1.0, 'replace_one': 2.0}[relation], relation is None\n",  # 9
        [2, 4, 6, 9]),
    "zcdp_function": (
        "def rho_for_epsilon(e):\n    return e\n"  # 1
        "def zcdp_to_epsilon(r):\n    return r\n"  # 3
        "def _host_rho(h):\n    return h\n"  # 5
        "def throughput(x):\n    return x\n",
        [1, 3, 5]),
}


@pytest.mark.parametrize("rule", sorted(_PLANTED))
def test_each_rule_catches_its_form(rule, tmp_path):
    """Each rule finds its planted forms (and not the look-alikes planted beside them) in every
    scanned folder, and nothing in the unscanned ones."""
    src, lines = _PLANTED[rule]
    for folder in (*SCANNED, "dpfair_jax/privacy", "dpfair_jax/audit"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "planted.py").write_text(src)
    found = scan(tmp_path, exempt={})
    assert {f.rule for f in found} == {rule}, [str(f) for f in found]
    for folder in SCANNED:
        assert sorted(f.line for f in found if f.path == f"{folder}/planted.py") == lines
    assert not [f for f in found if f.path.startswith(("dpfair_jax/privacy", "dpfair_jax/audit"))]


def test_an_exemption_names_path_function_and_rule(tmp_path):
    """An exemption covers only its own function and rule."""
    src = ("import jax\ndef init_w(k):\n    return jax.random.normal(k)\n"
           "def other(k):\n    return jax.random.normal(k)\n")
    (tmp_path / "dpfair_jax/algorithms").mkdir(parents=True)
    (tmp_path / "dpfair_jax/algorithms/x.py").write_text(src)
    found = scan(tmp_path, exempt={("dpfair_jax/algorithms/x.py", "init_w", "draw"): "start"})
    assert [(f.function, f.line) for f in found] == [("other", 5)]


if __name__ == "__main__":  # python tests/privacy/test_privacy_ownership.py [REPOSITORY_ROOT]
    import sys

    print("\n".join(map(str, scan(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))))
