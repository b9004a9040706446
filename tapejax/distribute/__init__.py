"""``tapejax.distribute`` (``tf.distribute``): TF's strategies as one SPMD program over a JAX
mesh.  See README.md in this folder for the design and where it differs from TF."""
from .context import (
                      ReplicaContext,
                      RunOptions,
                      Strategy,
                      StrategyExtended,
                      experimental_set_strategy,
                      get_replica_context,
                      get_strategy,
                      has_strategy,
                      in_cross_replica_context,
)
from .input import DistributedDataset, DistributedIterator, InputContext, InputOptions, InputReplicationMode
from .mirrored import (
                      CrossDeviceOps,
                      HierarchicalCopyAllReduce,
                      MirroredStrategy,
                      NcclAllReduce,
                      OneDeviceStrategy,
                      ReductionToOneDevice,
)
from .reduce import ReduceOp

__all__ = ["CrossDeviceOps", "DistributedDataset", "DistributedIterator", "HierarchicalCopyAllReduce",
           "InputContext", "InputOptions", "InputReplicationMode", "MirroredStrategy", "NcclAllReduce",
           "OneDeviceStrategy", "ReduceOp", "ReductionToOneDevice", "ReplicaContext", "RunOptions", "Strategy",
           "StrategyExtended", "experimental_set_strategy", "get_replica_context", "get_strategy", "has_strategy",
           "in_cross_replica_context"]
