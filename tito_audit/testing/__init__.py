"""Fixtures for tests, benchmarks and examples, shipped so that users can test their own loops the same way:
``synthetic`` plays the audit's scenarios through a correct or a deliberately broken loop and writes the
rollout log each would, with the truth of what was injected. Nothing in the tool imports this package.
"""
