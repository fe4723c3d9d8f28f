from __future__ import annotations

import pytest

from engine.api.errors import ConfigError
from engine.registry import parse_metadata, read_metadata


def test_real_256m_config(model_config_dir):
    m = read_metadata(model_config_dir)
    assert m.model_type == "idefics3"
    assert (m.text.hidden_size, m.text.num_hidden_layers, m.text.num_attention_heads) == (576, 30, 9)
    assert (m.text.num_key_value_heads, m.text.head_dim, m.text.num_key_value_groups) == (3, 64, 3)
    assert m.text.rope_theta == 100000.0
    assert (m.vision.hidden_size, m.vision.num_hidden_layers, m.vision.head_dim) == (768, 12, 64)
    assert m.vision.num_patches == 1024 and m.image_seq_len == 64
    assert m.image_token_id == 49190 and m.tie_word_embeddings is False
    assert m.eos_token_ids == (49279,)  # generation_config, not text_config.eos_token_id=2
    assert m.max_context == 8192


def _minimal(**text):
    return {"model_type": "idefics3", "scale_factor": 4, "image_token_id": 9,
            "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                              "num_attention_heads": 2, "patch_size": 16, "image_size": 512},
            "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                            "num_attention_heads": 4, "vocab_size": 100, **text}}


def test_transformers5_rope_parameters_and_eos_fallback():
    m = parse_metadata(_minimal(rope_parameters={"rope_theta": 130000.0, "rope_type": "default"},
                                          eos_token_id=[5, 6]))
    assert m.text.rope_theta == 130000.0
    assert m.eos_token_ids == (5, 6)
    assert m.text.num_key_value_heads == 4 and m.text.head_dim == 16


def test_missing_rope_theta_is_an_error_not_a_default():
    with pytest.raises(ConfigError, match="rope_theta is missing"):
        parse_metadata(_minimal())


def test_unknown_keys_ignored_and_generation_eos_wins():
    m = parse_metadata(_minimal(rope_theta=1e5, eos_token_id=2, foo="bar"),
                                 {"eos_token_id": 49279, "unknown": 1})
    assert m.eos_token_ids == (49279,)
