"""params.yaml is generated: it must always equal the composition of conf/ (what `dvc exp run` writes)."""

from pathlib import Path

import yaml

from tokenmill.config import compose
from tokenmill.ingest import Source, load_sources

ROOT = Path(__file__).resolve().parents[1]


def test_params_yaml_is_the_composition_of_conf(tmp_path):
    out = tmp_path / "params.yaml"
    compose([], conf_dir=ROOT / "conf", output=out)
    assert yaml.safe_load(out.read_text()) == yaml.safe_load((ROOT / "params.yaml").read_text()), \
        "params.yaml is stale: run `make params`"


def test_every_source_preset_declares_valid_sources(tmp_path):
    for preset in sorted((ROOT / "conf" / "source").glob("*.yaml")):
        out = tmp_path / f"{preset.stem}.yaml"
        compose([f"source={preset.stem}"], conf_dir=ROOT / "conf", output=out)
        sources = load_sources(yaml.safe_load(out.read_text())["sources"])
        assert sources and all(isinstance(s, Source) for s in sources)
