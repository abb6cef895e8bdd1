"""The converse stage of Mira: one converse command in, one bounded prompt payload out."""
