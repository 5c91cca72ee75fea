"""The markers of conversation items by simulator class.

Its own module: the plugin registers the markers in every pytest session where it
is installed, and must not import the scoring modules (``item``) to name them.
"""

from __future__ import annotations

CLASS_MARKERS = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "twitter_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_api",
    "VehicleControlAPI": "vehicle_control_api",
}
