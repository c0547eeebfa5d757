"""The QAIRT SDK: fetching its zip from Hugging Face, its environment and pins, the Docker image it runs in
(and the guard that keeps that image private), and the scheduled check for newer SDKs."""
