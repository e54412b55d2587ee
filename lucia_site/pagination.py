"""Paging every API list: `?limit=&offset=`, with a ceiling on `limit`."""

from rest_framework import pagination

DEFAULT_PAGE_SIZE = 50
# A larger `limit` is served as this many rows: one request cannot ask the database for everything.
MAX_PAGE_SIZE = 200


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    default_limit = DEFAULT_PAGE_SIZE
    max_limit = MAX_PAGE_SIZE

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = f"Rows per page (default {self.default_limit}, at most {self.max_limit})."
        return parameters
