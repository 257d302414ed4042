"""DP-SGD training shared by the paper-001 experiments: seeds x clip norms (x subsampling masks) in one
program per checkpoint, the non-private reference as one more lane, and each checkpoint's spend.

Privacy: every private lane is the kit's ``dpsgd.fit`` (Poisson sampling, clip, sum, noise);
:func:`checkpoint_spend` is ``dpsgd.spend`` of the steps run at the padded width the training used,
so its delta includes the truncation charge. The reference lane (no noise, no clipping) is an
analysis quantity, never released.
"""

from __future__ import annotations

__all__ = ["per_example_loss", "init_params", "padded_width", "checkpoint_spend", "train_checkpoints",
           "group_losses", "losses"]


def per_example_loss(model):
    from dpfair_jax import models as M

    def loss(p, xi, yi):
        return M.binary_logistic_loss(model.apply(p, xi), yi)

    return loss


def init_params(model, keys):
    """Initial params of each seed (``model.init`` at ``fold_in(key, 99)``), stacked. The keys are
    padded to a multiple of 8 (each seed's init is independent of the others), so runs with
    different seed counts share one compiled init program."""
    import jax
    import jax.numpy as jnp

    n = keys.shape[0]
    padded = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (-(-n // 8) * 8 - n,))])
    p = jax.vmap(model.init)(jax.vmap(lambda k: jax.random.fold_in(k, 99))(padded))
    return jax.tree_util.tree_map(lambda a: a[:n], p)


def padded_width(n: int, config: dict) -> int:
    """The static Poisson batch width of each checkpoint's ``dpsgd.fit`` call (its default for
    ``steps_per_checkpoint`` steps), passed to both the training and :func:`checkpoint_spend`."""
    from dpfair_jax.privacy import sampling

    bs = int(config["batch_size"])
    return min(sampling.max_batch_size_for(n, bs / n, int(config["steps_per_checkpoint"])), n)


def checkpoint_spend(n: int, config: dict, checkpoint: int):
    """``dpsgd.spend`` of the first ``checkpoint`` checkpoints of :func:`train_checkpoints`:
    ``checkpoint * steps_per_checkpoint`` Poisson steps at the width :func:`padded_width` the
    training used, so the spend's delta includes the truncation charge of that width."""
    from dpfair_jax import models as M
    from dpfair_jax.algorithms import dpsgd

    cfg = dpsgd.DPSGDConfig(model=M.mlp(hidden=(int(config["hidden"]),), out=1, activation="tanh"),
                            batch_size=int(config["batch_size"]), delta=float(config["delta"]),
                            steps=int(config["steps_per_checkpoint"]) * checkpoint,
                            max_batch_size=padded_width(n, config))
    return dpsgd.spend(cfg, n, dpsgd.DPSGDHparams(noise_multiplier=float(config["noise_multiplier"])))


def train_checkpoints(data, config: dict, seed: int, clips, *, masks=None):
    """Params at each checkpoint for seeds x clips (x masks), private and non-private reference.

    Returns ``(priv, ref)``: lists over checkpoints of param pytrees with leading axes
    ``[M?, S, C]`` (priv) and ``[M?, S]`` (ref: same batches, no noise, no clipping).
    """
    import jax
    import jax.numpy as jnp

    from dpfair_jax import models as M
    from dpfair_jax.algorithms import dpsgd

    model = M.mlp(hidden=(int(config["hidden"]),), out=1, activation="tanh", input_dim=data.d)
    seeds = int(config["seeds"])
    keys = jax.random.split(jax.random.key(seed), seeds)
    p0 = init_params(model, keys)
    steps = int(config["steps_per_checkpoint"])
    cfg = dpsgd.DPSGDConfig(model=model, batch_size=int(config["batch_size"]), steps=steps,
                            max_batch_size=padded_width(data.n, config), diagnostics=False)
    lr = float(config["learning_rate"])
    num_c = len(clips)
    z = float(config["noise_multiplier"])
    # the non-private reference is one more lane of the same program: clip 1e6, no noise
    clips = jnp.asarray(list(clips) + [1e6], jnp.float32)
    zs = jnp.asarray([z] * num_c + [0.0], jnp.float32)

    def one(k, p, c, zz, mask, d):  # data passed as an argument (not a closed-over constant)
        d = d if mask is None else d.replace(mask=mask)
        hp = dpsgd.DPSGDHparams(learning_rate=lr, clip_norm=c, noise_multiplier=zz)
        return dpsgd.fit(k, d, hp, cfg, params=p).params

    over_c = jax.vmap(one, in_axes=(None, 0, 0, 0, None, None))
    over_s = jax.vmap(over_c, in_axes=(0, 0, None, None, None, None))
    fn = jax.jit(over_s if masks is None else jax.vmap(over_s, in_axes=(None, 0, None, None, 0, None)))
    lead = () if masks is None else (masks.shape[0],)
    pp = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a[:, None], lead + (a.shape[0], num_c + 1) + a.shape[1:]),
                                p0)
    priv, ref = [], []
    for t in range(int(config["checkpoints"])):
        kt = jax.vmap(lambda k: jax.random.fold_in(k, t))(keys)
        # the runs of one seed use the same key (so the same batches) for every C and the reference
        pp = fn(kt, pp, clips, zs, masks, data)
        ax = len(lead) + 1  # the clip axis
        priv.append(jax.tree_util.tree_map(lambda a: jax.lax.slice_in_dim(a, 0, num_c, axis=ax), pp))
        ref.append(jax.tree_util.tree_map(lambda a: jnp.take(a, num_c, axis=ax), pp))
    return model, priv, ref


def group_losses(model, params, data, mask=None):
    """Mean training loss per group; params with any leading axes -> [..., K]."""
    import jax
    import jax.numpy as jnp

    from dpfair_jax import models as M

    w = jax.nn.one_hot(data.s, data.num_groups)
    if mask is not None:
        w = w * mask[..., :, None]

    def f(p, ww):
        ell = M.binary_logistic_loss(model.apply(p, data.x), data.y)
        return (ell @ ww) / jnp.maximum(jnp.sum(ww, 0), 1.0)

    lead = params["layers"][0]["kernel"].ndim - 2
    inner = f
    for _ in range(lead - (0 if mask is None else 1)):
        inner = jax.vmap(inner, in_axes=(0, None))
    if mask is None:
        return inner(params, w)
    return jax.vmap(inner)(params, w)


def losses(model, p, data):
    from dpfair_jax import models as M

    return M.binary_logistic_loss(model.apply(p, data.x), data.y)
