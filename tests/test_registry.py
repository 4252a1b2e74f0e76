"""The registry: what a spec built by name records."""

from __future__ import annotations

from nemo_gym import registry


def test_a_model_built_by_name_never_records_its_api_key() -> None:
    # `registry.build` recorded every option it was given, so `gym eval run --api-key`
    # wrote the key into run.json and every row.
    model = registry.build(
        "model", "openai", model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-secret"
    )
    spec = registry.spec_of(model, "model")
    assert spec.options == {"model": "m", "base_url": "http://127.0.0.1:9/v1"}
    assert "sk-secret" not in spec.model_dump_json()


def test_an_env_built_by_name_records_what_its_class_records() -> None:
    env = registry.build("env", "arithmetic", seed=3)
    assert registry.spec_of(env, "env").options == env.to_spec().options == {"seed": 3}
