"""Honest declarations of what an implementation supports.

A model's catalog entry says what the model can do; these say what our code
for that provider can carry. A request needs both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.messages import ModelInfo


@dataclass(frozen=True, slots=True)
class Capabilities:
    tools: bool = False
    parallel_tool_calls: bool = False
    vision: bool = False
    documents: bool = False
    audio: bool = False
    reasoning: bool = False
    structured_output: bool = False
    streaming: bool = True
    prompt_caching: bool = False

    def for_model(self, model: ModelInfo) -> Capabilities:
        """What a request to `model` through this implementation may use."""
        return Capabilities(
            tools=self.tools and model.tools,
            parallel_tool_calls=self.parallel_tool_calls and model.tools,
            vision=self.vision and model.vision,
            documents=self.documents and model.vision,
            audio=self.audio,
            reasoning=self.reasoning and model.reasoning,
            structured_output=self.structured_output and model.structured_output,
            streaming=self.streaming and model.streaming,
            prompt_caching=self.prompt_caching,
        )
