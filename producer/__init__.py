"""modelplan's client side: what other services and node agents import or run."""

from producer.client import Client, request_from_folder, request_from_listing, request_from_repository
from worker.beats import Beat

__all__ = ["Beat", "Client", "request_from_folder", "request_from_listing", "request_from_repository"]
