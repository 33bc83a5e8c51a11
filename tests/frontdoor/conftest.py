from door import door  # noqa: F401 - the fixture, for every test here
