"""Consolidated placement must match the Lucid artifact's placer, quirks included."""

import pytest

from lucidd.cluster import VCSpec, VirtualCluster, check_trace_fits, load_vc_config, place_consolidated
from lucidd.errors import ConfigError, TraceError


def test_small_job_best_fit_lowest_index_on_ties():
    assert place_consolidated([8, 3, 5, 3], 2, 8) == ((1, 2),)
    assert place_consolidated([8, 3, 5, 3], 4, 8) == ((2, 4),)
    assert place_consolidated([8, 1, 1, 1], 2, 8) == ((0, 2),)


def test_no_fit_when_fragmented():
    assert place_consolidated([4, 4, 4], 5, 8) is None  # 12 free GPUs, but no node has 5


def test_large_job_takes_whole_free_nodes_in_index_order():
    assert place_consolidated([8, 2, 8, 8], 16, 8) == ((0, 8), (2, 8))
    assert place_consolidated([8, 7, 8], 24, 8) is None


def test_remainder_goes_to_next_most_free_node():
    # 12 GPUs = one whole node + 4 on the node with the most free GPUs after it
    assert place_consolidated([5, 8, 6], 12, 8) == ((1, 8), (2, 4))
    # artifact quirk: with spare whole nodes the remainder lands on a whole free node
    assert place_consolidated([8, 8, 6], 12, 8) == ((0, 8), (1, 4))
    # the node after the whole ones is too small: the job waits even if another would do
    assert place_consolidated([8, 3, 3], 11, 8) == ((0, 8), (1, 3))
    assert place_consolidated([8, 2, 2, 2], 11, 8) is None


def test_virtual_cluster_allocates_lowest_gpus_and_shares():
    vc = VirtualCluster(VCSpec("a", 2, 8))

    class J:
        def __init__(self, i):
            self.job_id = i
            self.alloc = ()

    a, b, c = J("a"), J("b"), J("c")
    vc.allocate(a, ((1, 3),))
    assert a.alloc == ((1, (0, 1, 2)),)
    vc.allocate_shared(b, a)
    assert vc.free == [8, 5]
    with pytest.raises(ValueError):
        vc.allocate_shared(c, a)  # at most two jobs per GPU
    vc.release(a)
    assert vc.free == [8, 5]  # b still holds them
    vc.release(b)
    assert vc.free == [8, 8]


def test_vc_config_layouts(tmp_path):
    p = tmp_path / "vc.csv"
    p.write_text(",num\nvcA,2\nvcB,3\n")
    spec = load_vc_config(p)
    assert spec.total_gpus == 40 and list(spec.vcs) == ["vcA", "vcB"]
    p.write_text("vc,nodes,gpus_per_node\nx,2,4\n")
    assert load_vc_config(p).vcs["x"].gpus == 8
    p.write_text("vc,nodes\nx,zero\n")
    with pytest.raises(ConfigError, match="row 2"):
        load_vc_config(p)


def test_job_bigger_than_vc_is_reported_with_row(tmp_path):
    import pandas as pd

    from lucidd.cluster import ClusterSpec

    spec = ClusterSpec({"a": VCSpec("a", 1, 8)})
    jobs = pd.DataFrame({"job_id": ["1", "2"], "vc": ["a", "a"], "gpu_num": [8, 16], "row": [2, 3]})
    with pytest.raises(TraceError) as err:
        check_trace_fits(jobs, spec, "t.csv")
    msg = str(err.value)
    assert "t.csv" in msg and "row 3" in msg and "gpu_num" in msg and "16" in msg
