"""madara: reproduce *To Isolate or to Score?* (MADARA) and run its Diagnose->Treat pipeline."""

__version__ = "0.1.0"
