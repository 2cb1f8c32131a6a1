"""The base modules every layer of albert_tf may import: config, feature
names, file writing, flags, the family registry, the run record and errors.
They import nothing above them in the package."""
