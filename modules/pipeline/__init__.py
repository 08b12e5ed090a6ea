"""The pipelines: the module interface, the chain, and the built-in stages.

A module of your own subclasses ``PipelineModule`` (importable from here) and is named
in config.xml with ``<module class="package.module:ClassName"/>``.
"""

from wiremq.modules.pipeline.chain import Batch, ModuleContext, PipelineModule, Stage

__all__ = ["Batch", "ModuleContext", "PipelineModule", "Stage"]
