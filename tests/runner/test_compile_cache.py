"""The CLI's compile-cache choice (compile_cache.configure): flag, then env, then the user folder."""

import jax
import pytest

from dpfair_jax import compile_cache as cc


@pytest.fixture(autouse=True)
def _restore():
    yield
    cc.disable()


def test_flag_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "env"))
    assert cc.configure(tmp_path / "flag") == (tmp_path / "flag").resolve()
    assert jax.config.jax_compilation_cache_dir == str((tmp_path / "flag").resolve())


def test_env_then_off(tmp_path, monkeypatch):
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "env"))
    assert cc.configure() == (tmp_path / "env").resolve()
    cc.disable()
    monkeypatch.setenv(cc.ENV_VAR, "off")
    assert cc.configure() is None


def test_default_is_a_user_level_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cc.default_dir() == tmp_path / "xdg" / "dpfair_jax" / "xla"
    assert cc.configure() == (tmp_path / "xdg" / "dpfair_jax" / "xla").resolve()
    assert (tmp_path / "xdg" / "dpfair_jax" / "xla").is_dir()


def test_unusable_default_warns_and_stays_off(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.warns(UserWarning, match="cache off"):
        assert cc.configure() is None
