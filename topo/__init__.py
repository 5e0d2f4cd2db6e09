"""topo: hardware for trainsim — devices, links, memory tiers, clusters, graphs, placement, and
the compute and collective cost models. Depends on nothing else in trainsim."""

from core.errors import UnknownNameError
from topo.cluster import FABRICS, INTRA_NODE_KINDS, ClusterSpec
from topo.cluster_file import cluster_from_mapping, dump_cluster_toml, load_cluster_file
from topo.cluster_presets import cluster_presets, get_cluster
from topo.collectives import OPS, PROTOCOLS, CollectiveCost, CollectiveModel, bus_factor
from topo.compute import OP_CLASSES, compute_time_s
from topo.device import DTYPES, DeviceSpec
from topo.device_presets import device_presets, get_device
from topo.flows import Flow
from topo.graph import build_cluster_graph
from topo.host import HostSpec
from topo.link import LinkSpec
from topo.link_presets import get_link, link_presets
from topo.memory import host_copy_GBps, host_copy_time_s
from topo.nccl_tuning import NCCL_VERSIONS, NcclTuning, get_nccl_tuning
from topo.placement import Placement
from topo.routing import Router

__all__ = [
    "DTYPES", "FABRICS", "INTRA_NODE_KINDS", "NCCL_VERSIONS", "OPS", "OP_CLASSES", "PROTOCOLS",
    "ClusterSpec", "CollectiveCost", "CollectiveModel", "DeviceSpec", "Flow", "HostSpec", "LinkSpec",
    "NcclTuning", "Placement", "Router", "UnknownNameError", "build_cluster_graph", "bus_factor",
    "cluster_from_mapping", "cluster_presets", "compute_time_s", "device_presets",
    "dump_cluster_toml", "get_cluster", "get_device", "get_link", "get_nccl_tuning",
    "host_copy_GBps", "host_copy_time_s", "link_presets", "load_cluster_file",
]
